"""The index stage with the models fitted on the staged version inside it: the answer scorer (SPEC §9) and the
related-policies model (SPEC §12): when the pipeline is given a question set
(``PipelineConfig.answer_questions``, NCPQA JSON Lines), the scorer pinned into the new index version is fitted
on those questions against that version itself — its encoder, BM25 side and texts, while it is staged, before
``index/CURRENT`` switches (:class:`retrieval.parts.FittedPart`) — instead of installing a scorer fitted
elsewhere. Without questions it is :func:`retrieval.stages.index_publish_stage` as it is.
"""
from __future__ import annotations

import os
from pathlib import Path

from retrieval.chunks import ChunkConfig
from retrieval.dense import IndexConfig
from retrieval.fusion import FusionConfig
from retrieval.parts import ANSWER_SCORER, FittedPart
from retrieval.sparse import SparseConfig

SCORER_FILE = "answer-scorer.json"
RELATED_CACHE = "cache/related"  # the INDEX contract's scratch: default pairs, embedded segments


def scorer_part(questions: str | os.PathLike, data_dir: str | os.PathLike | None = None, tokenizer=None,
                log=print) -> FittedPart:
    """The ``answer_scorer`` part fitted on the NCPQA-format question file ``questions``
    (:func:`answers.fit.fit_on_questions`) over the staged version, as ``flows.answer_eval --refit all`` fits
    it. ``data_dir``: where the import and cleaning lineage lies (``documents``, ``rejects``: a question about a
    document cleaning dropped as a duplicate goes to the one kept, :func:`answers.ncpqa.duplicate_targets`).
    The part's record holds the scorer's ``provenance`` and ``fit`` (the figures of the fit).

    Raises (when fitted): FileNotFoundError / ValueError naming the file (see ``fit_on_questions``).
    """
    def fit(index_root: Path, version: str) -> tuple[str, dict]:
        from answers.backend import SearchBackend
        from answers.fit import fit_on_questions
        from answers.ncpqa import duplicate_targets

        backend = SearchBackend(index_root, version, tokenizer=tokenizer)
        dups = duplicate_targets(data_dir) if data_dir is not None else {}
        scorer, figures = fit_on_questions(backend, questions, dups, log)
        return scorer.to_json(), {"provenance": scorer.info["provenance"], "fit": figures}

    return FittedPart(ANSWER_SCORER, SCORER_FILE, fit)


def index_publish_stage(clean_dir, ckpt_dir, index_root, cfg: ChunkConfig, index_cfg: IndexConfig = IndexConfig(),
                        n_parts: int = 1, batch_size: int = 64, device: str = "auto", *,
                        sparse: SparseConfig | None = SparseConfig(), fusion: FusionConfig = FusionConfig(),
                        tokenizer=None, staging: str | os.PathLike | None = None,
                        parts: list[dict] | None = None, answer_scorer: str | os.PathLike | None = None,
                        reranker: str | os.PathLike | None = None,
                        answer_reranker: str | os.PathLike | None = None,
                        answer_questions: str | os.PathLike | None = None,
                        related_pairs: str | os.PathLike | None = None,
                        related_corpus: str | os.PathLike | None = None, related_segments: int = 1) -> dict:
    """:func:`retrieval.stages.index_publish_stage`; with ``answer_questions`` (a question file in the NCPQA
    format) the version's ``answer_scorer`` part is fitted on it over the staged version (:func:`scorer_part`;
    ``answer_scorer`` is then not installed) and the result's ``serving_parts.answer_scorer.fit`` holds the fit's
    figures; ``answer_reranker`` (a cross-encoder part) is installed before that fit, which then reads its
    sentence scores (:mod:`answers.rerank_features`). With ``related_pairs`` (a pair file) or ``related_corpus`` (a corpus to derive the default
    title-pattern pairs from) the version also gets its ``related`` part: LTM-B trained over the staged version
    (:func:`docmatch.stage.related_part`, SPEC §12; its cache under ``DATA/cache/related``).

    Raises:
        FileNotFoundError / ValueError: naming the question file: missing, not NCPQA JSON Lines, or no question
            about a document of the version (nothing is published then; ``CURRENT`` is left as it was).
    """
    from retrieval.stages import index_publish_stage as publish

    fitted = ()
    if answer_questions:
        if tokenizer is None and sparse is not None:  # one segmenter load for the BM25 side and the fit
            from retrieval.sparse import make_tokenizer

            tokenizer = make_tokenizer(sparse.segmenter)
        fitted = (scorer_part(answer_questions, Path(clean_dir).parent, tokenizer),)
    if related_pairs or related_corpus:
        from docmatch.stage import related_part

        fitted += (related_part(related_pairs or None, related_corpus or None,
                                Path(clean_dir).parent / RELATED_CACHE, related_segments),)
    return publish(clean_dir, ckpt_dir, index_root, cfg, index_cfg, n_parts, batch_size, device, sparse=sparse,
                   fusion=fusion, tokenizer=tokenizer, staging=staging, parts=parts,
                   answer_scorer=None if answer_questions else answer_scorer, reranker=reranker,
                   fitted_parts=fitted, answer_reranker=answer_reranker)
