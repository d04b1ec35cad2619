"""The one place the answer stage touches the retrieval package (SPEC §7, §9): a loaded index version
(:class:`retrieval.bundle.ServingBundle`) seen as what answers need — its hybrid search, its pinned encoder, the
segmenter of its BM25 side, its documents' texts, its answer scorer and the answer cross-encoder that scorer
may read.

Everything the answers need from an index version goes through :class:`SearchBackend`, so a change inside
``retrieval/`` meets this module alone.
"""
from __future__ import annotations

import os
from functools import cached_property
from typing import Sequence

import numpy as np

from retrieval.bundle import load_bundle
from retrieval.hits import SearchHit
from answers.parts import ANSWER_RERANKER_PART, ANSWER_SCORER_PART
from retrieval.parts import PartError



class SearchBackend:
    """One index version (default: the serving one, ``index/CURRENT`` read once): ``search`` (the project's
    hybrid search), query/passage vectors from the version's pinned encoder, tokens from the segmenter that
    built its BM25 side, ``store`` (the version's own document texts), ``scorer`` (its pinned answer scorer)
    and ``doc_cache``: the answer stage's per-document work under these tokens
    (:class:`~answers.doc_cache.DocumentCache`, ``cache_docs`` documents).

    Raises (at construction): IndexMissingError, and whatever :func:`retrieval.bundle.load_bundle` raises for
    a version it refuses (e.g. ``EncoderMismatchError`` for a tampered encoder).
    """

    def __init__(self, index_root: str | os.PathLike, version: str | None = None, tokenizer=None,
                 cache_docs: int = 4096):
        from answers.doc_cache import DocumentCache

        self.bundle = load_bundle(index_root, version, tokenizer)
        self._retriever = self.bundle.retriever
        self.version, self.key = self.bundle.version, self.bundle.key
        self.model_id, self.encoder_name = self.bundle.model_id, self.bundle.encoder_name
        self.doc_cache = DocumentCache(cache_docs)

    @cached_property
    def store(self):
        """The version's documents (:class:`~answers.documents.DocumentStore` over its ``texts`` part).

        Raises:
            PartError: the version has no texts part or it changed since publication."""
        from answers.documents import DocumentStore

        return DocumentStore.from_frame(self.bundle.texts)

    @cached_property
    def scorer(self):
        """The version's pinned answer scorer (:class:`~answers.scorer.AnswerScorer`).

        Raises:
            answers.scorer.ScorerMissingError: the version has none (refused at publication: the reason), or
                its file changed since publication.
            ValueError: the file is not a scorer of this code's features."""
        from answers.scorer import ScorerMissingError

        try:
            scorer = self.bundle.load(ANSWER_SCORER_PART)
        except PartError as exc:
            raise ScorerMissingError(f"{exc}; fit one on a question set: python -m flows.answer_eval "
                                     "--data-dir DATA (docs/answers.md)") from None
        self._check_pin(scorer)
        return scorer

    def _check_pin(self, scorer) -> None:
        """Raise ``ScorerMissingError`` when ``scorer`` reads an answer cross-encoder's scores
        (:func:`answers.scorer.reads_reranker`) other than the version's ``answer_reranker`` part (its sha256
        in the scorer's ``info.provenance``) or the version holds none."""
        from answers.scorer import ScorerMissingError, reads_reranker

        if not reads_reranker(scorer):
            return
        want = (scorer.info.get("provenance") or {}).get("answer_reranker")
        have = ((self.bundle.manifest.get("parts") or {}).get(ANSWER_RERANKER_PART.name) or {}).get("sha256")
        if not want or want != have:
            raise ScorerMissingError(f"the answer scorer reads the scores of answer cross-encoder "
                                     f"{str(want)[:12]}, which index {self.version} does not hold (it holds "
                                     f"{str(have)[:12] if have else 'none'}): publish the scorer with its "
                                     "cross-encoder (answer_reranker) or fit it again")

    def reranker_for(self, scorer):
        """The version's answer cross-encoder when ``scorer`` reads its scores (loaded and checked), else None.

        Raises:
            answers.scorer.ScorerMissingError: the scorer reads another cross-encoder than the version's, or the
                version holds none. PartError / CrossEncoderPartError / CrossEncoderMismatchError: the part's
                files changed since publication, or it was trained on another encoder."""
        from answers.scorer import reads_reranker

        self._check_pin(scorer)
        return self.answer_reranker if reads_reranker(scorer) else None

    def reader(self, scorer=None):
        """The version's :class:`~answers.reader.Reader`: the reader part it was published with beside the span
        scorer (:attr:`own_reader`), else the span scorer (``scorer``, else the version's pinned one) with the
        answer cross-encoder it reads, if any (:class:`~answers.reader.ScorerReader`). A ``scorer`` given is
        always the one read with (the evaluation flows measure scorers that way).

        Raises:
            answers.scorer.ScorerMissingError / PartError: as :attr:`scorer` and :meth:`reranker_for`; PartError
                too when the version's reader part changed since publication."""
        from answers.reader import ScorerReader

        if scorer is None and self.own_reader is not None:
            return self.own_reader
        scorer = scorer if scorer is not None else self.scorer
        return ScorerReader(scorer, self.reranker_for(scorer), self.version)

    @cached_property
    def own_reader(self):
        """The reader part the version holds besides the span scorer and its cross-encoder: of the declared parts
        of role ``reader`` (:mod:`retrieval.serving_parts`) installed in the version, the last declared whose
        loader returns an :class:`~answers.reader.Reader` (loaded and checked); None when it holds none.

        Raises:
            PartError: that part changed since publication (or its loader refuses it: another encoder's)."""
        from answers.reader import Reader
        from retrieval.serving_parts import serving_parts

        for part in reversed(serving_parts()):
            if part.role != "reader" or part in (ANSWER_SCORER_PART, ANSWER_RERANKER_PART):
                continue
            if self.bundle.has_part(part.name) and isinstance(loaded := self.bundle.load(part), Reader):
                return loaded
        return None

    @property
    def reader_settings(self) -> dict:
        """The answer settings pinned with the version's reader part (:func:`answers.parts.reader_record`), {}
        for a version published before they were."""
        rec = (self.bundle.manifest.get("parts") or {}).get(ANSWER_SCORER_PART.name)
        return dict(rec.get("settings") or {}) if isinstance(rec, dict) else {}

    @cached_property
    def answer_reranker(self):
        """The version's answer cross-encoder (:class:`retrieval.cross_encoder.CrossEncoder` on its pinned
        encoder, :mod:`answers.rerank_features`), or None when it was published without one.

        Raises:
            PartError: the part or its weights changed since publication.
            retrieval.cross_encoder.CrossEncoderMismatchError: trained on another encoder."""
        if not self.bundle.has_part(ANSWER_RERANKER_PART.name):
            return None
        return self.bundle.load(ANSWER_RERANKER_PART)

    def search(self, question: str, k: int, mode: str = "hybrid",
               tokens: Sequence[str] | None = None, docs: set[str] | None = None, order=None) -> list[SearchHit]:
        """Top-``k`` chunks of the version's query pipeline (``hybrid``: search then its reranker, if any;
        ``sparse`` = BM25 alone, for baselines), best first, as :class:`~retrieval.hits.SearchHit` s (chunk_id,
        doc_id, start, end, text, title, source, url, score, dense_score, sparse_score, dense_rank, sparse_rank,
        rerank_score; external_id when the documents had one); ``docs``: the doc ids a scoped search may return
        (None: all); ``order``: that search's reorder (:func:`retrieval.scoped.scope_order`). Raises
        ``retrieval.query.QueryError`` on a bad question or ``k``."""
        return self.bundle.pipeline.search(question, k, mode=mode, tokens=tokens, docs=docs, order=order)

    def embed_queries(self, texts: Sequence[str]) -> np.ndarray:
        """Query vectors (n, dim), L2-normalised float32, from the version's pinned encoder."""
        return np.asarray(self._retriever.encoder.encode_queries(list(texts)), dtype=np.float32)

    def embed_passages(self, texts: Sequence[str]) -> np.ndarray:
        """Passage vectors (n, dim), L2-normalised float32, from the version's pinned encoder."""
        if not texts:
            return np.zeros((0, 1), dtype=np.float32)
        return np.asarray(self._retriever.encoder.encode_corpus(list(texts)), dtype=np.float32)

    def tokenize(self, texts: Sequence[str]) -> list[list[str]]:
        """BM25 tokens (the segmenter that built the version's sparse side; letters/digits only)."""
        return self._retriever.tokenize(list(texts))
