"""Extractive answers with their sources (SPEC §9): the document first, then the span within it.

For a question: the top chunks of the hybrid search (SPEC §7) grouped by document (a document counts once,
at the rank of its best chunk); every sentence, 2–3 sentence window, clause and clause run of the first
``max_docs`` documents is a candidate, with the entities and the stretches between the question's echoes of each
sentence (:mod:`answers.candidates`; long documents: only the sentences near their retrieved chunks); of these,
the spans of the sentences the question's BM25 ranks first in their document and of the sentence after each
reach the learned :class:`~answers.scorer.AnswerScorer` (a cascade: :func:`focus_sentences`), which scores
documents and spans (:mod:`answers.features`); the answer list holds the best span of each document, best
first, with its offsets into the cleaned document text. What does not depend on the question (sentences,
candidates, their question-free features, tokens) is computed once per document (:mod:`answers.doc_cache`).

Records: the search's hits grouped by document (:class:`DocHits`), then one
:class:`~answers.features.DocCandidates` per document, built once with all its fields, in
:class:`~answers.features.Prepared`. The question is checked by :func:`check_question` (:meth:`Answerer.answer`,
``flows.ask``) and once more by the search itself (``retrieval.query.check_query``, inside every search call);
:func:`prepare` segments it once (:class:`~answers.features.Question`) and gives the tokens to the search's
BM25 side.
"""
from __future__ import annotations

import os
import unicodedata
from collections import OrderedDict
from dataclasses import dataclass, replace
from pathlib import Path
from typing import Sequence

import numpy as np

from answers.candidates import Span, gap_spans, sentence_offsets
from answers.features import (STATIC, DocCandidates, Prepared, Question, doc_features, focus_sentences,
                               span_matrix, static_span_features)
from retrieval.hits import RankedHit, SearchHit
from retrieval.sparse import bm25_scores


class AnswerInputError(ValueError):
    """A question the stage refuses as given (empty, too long, no letters or digits, bad ``k``)."""


@dataclass(frozen=True)
class AnswerConfig:
    """search_k: chunks asked of the hybrid search; max_docs: documents whose spans are scored;
    max_doc_chars: longer documents contribute only sentences within ``margin`` chars of a retrieved chunk;
    dense_sentences: sentences (the BM25's best across the candidate documents) compared with the question
    by the index's encoder (0: none); focus_sentences / focus_after: per document, only the spans of the
    sentences BM25 ranks first and those just after them are scored (:func:`focus_sentences`; 0: all);
    passage_chars: the passage shown around an answer (each side);
    max_k: most answers one question may ask for; max_chars: longest question accepted."""

    search_k: int = 20
    max_docs: int = 5
    max_doc_chars: int = 20000
    margin: int = 600
    dense_sentences: int = 0
    focus_sentences: int = 3
    focus_after: int = 1
    passage_chars: int = 150
    max_k: int = 20
    max_chars: int = 1000


READER_SETTINGS = ("search_k", "max_docs", "max_doc_chars", "margin", "dense_sentences", "focus_sentences",
                   "focus_after", "passage_chars")


def reader_record() -> dict:
    """Fields pinned into the reader part's manifest record (:data:`answers.parts.ANSWER_SCORER_PART`): the
    reader (``module:class``) and the :class:`AnswerConfig` fields that change its answers
    (:data:`READER_SETTINGS`, their defaults: what the version was published to answer with)."""
    cfg = AnswerConfig()
    return {"reader": "answers.reader:ScorerReader", "settings": {f: getattr(cfg, f) for f in READER_SETTINGS}}


def check_question(question, k, cfg: AnswerConfig = AnswerConfig()) -> str:
    """The question stripped, after the checks of the search (``retrieval.query.check_query``: empty, too
    long, ``k`` out of range) plus one of its own: a question must hold a letter or a digit. Called where a
    question enters (:meth:`Answerer.answer`, ``flows.ask``); :func:`prepare` takes the checked question, and
    the search it runs checks it again (a refused question raises ``retrieval.query.QueryError`` there).

    Raises:
        AnswerInputError: the message names the problem.
    """
    if isinstance(question, str) and question.strip() and len(question) <= cfg.max_chars:
        if not any(unicodedata.category(c)[0] in "LN" for c in question):
            raise AnswerInputError("the question holds no letters or digits (only punctuation or symbols)")
    from retrieval.query import QueryError, QueryLimits, check_query

    try:
        return check_query(question, k, QueryLimits(max_k=cfg.max_k, max_chars=cfg.max_chars))
    except QueryError as exc:
        raise AnswerInputError(str(exc)) from exc


@dataclass(frozen=True)
class DocHits:
    """One document's hits among the search's top ``search_k`` chunks: ``hits`` (the search's
    :class:`~retrieval.hits.SearchHit` s, best first, each in a :class:`~retrieval.hits.RankedHit` with its
    0-based place in the top list), ``first_hit`` (the rank of the best) and ``extra`` (a document added after
    the retrieved ones, with no hits: training's gold document)."""

    doc_id: str
    hits: list[RankedHit]
    first_hit: int
    extra: bool = False


def group_hits(hits: Sequence[SearchHit], max_docs: int) -> list[DocHits]:
    """Hits grouped by document in order of each document's best hit (the first ``max_docs`` documents)."""
    groups: OrderedDict = OrderedDict()
    for rank, h in enumerate(hits):
        groups.setdefault(h.doc_id, DocHits(h.doc_id, [], rank)).hits.append(RankedHit(rank, h))
    return list(groups.values())[:max_docs]


def _text_of(doc_id: str, store) -> tuple[str, dict]:
    """The cleaned text of a grouped document and its metadata, from the index version's own texts (the
    offsets of its chunks point into them).

    Raises:
        ValueError: the version's texts lack the document (a version whose parts do not match its chunks).
    """
    text, meta = store.get(doc_id)
    if text is None:
        raise ValueError(f"document {doc_id!r} of the index's chunks is not in its texts part")
    return text, meta


def _entry(group: DocHits, text: str, title: str, backend, cfg: AnswerConfig, cache):
    """The :class:`~answers.doc_cache.DocumentEntry` of a grouped document: from ``cache`` when the whole
    document is read; built for this question alone when only the sentences near its retrieved chunks are
    (documents over ``max_doc_chars``), with what spans the whole text (code points, normalised text, the
    tokens of sentences read before) from ``cache`` (:meth:`~answers.doc_cache.DocumentCache.whole`)."""
    from answers.doc_cache import WholeText, build_entry

    hits = group.hits
    if len(text) > cfg.max_doc_chars and hits:
        whole = cache.whole(group.doc_id, text) if cache is not None else WholeText.of(text)
        sents = whole.near([(r.hit.start, r.hit.end) for r in hits], cfg.margin)
        return build_entry(text, title, sents, backend.tokenize, whole, static=False)
    if cache is None:
        return build_entry(text, title, sentence_offsets(text), backend.tokenize)
    return cache.get(group.doc_id, text, title, backend.tokenize)


def _groups(q: Question, backend, cfg: AnswerConfig, extra_doc: str | None, docs: set[str] | None = None,
            order=None) -> list[DocHits]:
    """The search's hits for the question ``q`` (its tokens given to the search's BM25 side) grouped by document
    (:func:`group_hits`), ``extra_doc`` added after them when missing. The search checks the question once more
    (``retrieval.query.check_query``, as every search call does: ``QueryError``)."""
    scoped = {} if docs is None else {"docs": docs}  # a scoped search (retrieval.scoped): the allowed doc ids
    scoped.update({} if order is None else {"order": order})  # and its reorder (retrieval.scope_order)
    groups = group_hits(backend.search(q.text, cfg.search_k, tokens=q.tokens, **scoped), cfg.max_docs)
    if extra_doc is not None and all(g.doc_id != extra_doc for g in groups):
        groups.append(DocHits(extra_doc, [], cfg.search_k, extra=True))
    return groups


def prepare(question: str, backend, store, cfg: AnswerConfig = AnswerConfig(), extra_doc: str | None = None,
            cache=None, reranker=None, docs: set[str] | None = None, order=None) -> Prepared:
    """Retrieve, group, split and featurise one question, checked by the caller (:func:`check_question`:
    :meth:`Answerer.answer`; fitting passes its question set's questions stripped and lets the search refuse a
    bad one). The question is segmented once, here (:class:`~answers.features.Question`), and its tokens
    given to the search's BM25 side. ``extra_doc``: a document added after the retrieved
    ones when missing (training: the gold document), with no hits. ``cache``: a
    :class:`~answers.doc_cache.DocumentCache` for the question-free part of each document (features are the
    same with or without it). ``reranker``: the version's answer cross-encoder (``backend.answer_reranker``)
    when the scorer reads its sentence scores: the span matrix then ends with
    :data:`answers.rerank_features.CE_FEATURES` (the focus sentences of :func:`focus_sentences` scored).
    ``docs``: the doc ids a scoped search may return (:func:`retrieval.scoped.scoped_docs`); None: all.
    ``order``: that search's reorder (:func:`retrieval.scoped.scope_order`); None: the search's own order."""
    q = Question.of(question, backend.tokenize)
    groups = _groups(q, backend, cfg, extra_doc, docs, order)
    texts = [_text_of(g.doc_id, store) for g in groups]
    entries = [_entry(g, text, meta.get("title") or "", backend, cfg, cache) for g, (text, meta) in zip(groups, texts)]
    bm = bm25_scores(list(q.tokens), [c for e in entries for c in e.sent_counts],
                     np.concatenate([e.sent_lens for e in entries] or [np.zeros(0)]))
    dense = _dense(question, entries, bm, backend, cfg.dense_sentences)
    docs, pos = [], 0
    for g, (text, meta), e in zip(groups, texts, entries):
        d_bm, d_dense, pos = bm[pos:pos + len(e.sentences)], dense[pos:pos + len(e.sentences)], pos + len(e.sentences)
        spans, static = _focused(question, d_bm, e, meta.get("title") or "", cfg)
        docs.append(DocCandidates(g.doc_id, g.hits, g.first_hit, g.extra, meta, e, d_bm, d_dense, spans, static))
    best = np.asarray([float(d.bm.max()) if len(d.sentences) else 0.0 for d in docs])
    best_all = max(best.tolist()) if len(best) else 0.0
    span_x = span_matrix(q, docs, best_all, cfg.search_k)
    if reranker is not None:
        from answers.rerank_features import ce_matrix, sentence_scores

        top = cfg.focus_sentences or AnswerConfig.focus_sentences  # 0 ("every sentence") scores the default few
        scores = sentence_scores(question, docs, reranker.score, top, cfg.focus_after)
        span_x = np.hstack([span_x, ce_matrix(docs, scores)])
    span_doc = np.concatenate([np.full(len(d.spans), g, dtype=int) for g, d in enumerate(docs)] or [np.zeros(0, int)])
    return Prepared(question, docs, doc_features(docs, q, best), span_x, span_doc, [sp for d in docs for sp in d.spans])


def _focused(question: str, bm: np.ndarray, e, title: str, cfg: AnswerConfig) -> tuple[list[Span], np.ndarray]:
    """The spans of a document ``e`` (:class:`~answers.doc_cache.DocumentEntry`) scored for ``question``: its
    cached candidates in the focused sentences (:func:`focus_sentences` of ``bm``, the question's BM25 per
    sentence; a sentence that is itself a question, :func:`answers.candidates.is_question`, never is) plus
    the question's gaps there; and their question-free feature rows ((n_spans, |STATIC|) float64)."""
    focus = focus_sentences(bm, cfg.focus_sentences, cfg.focus_after) & ~e.asks  # questions never answer
    firsts = (e.static[:, STATIC.index("first")].astype(int) if e.static is not None
              else np.array([sp.first for sp in e.spans], dtype=int).reshape(len(e.spans)))
    keep = np.flatnonzero(focus[firsts]) if len(e.spans) else np.zeros(0, int)
    kept = [e.spans[i] for i in keep.tolist()]
    gaps = gap_spans(e.text, [se if focus[i] else (se[0], se[0]) for i, se in enumerate(e.sentences)], question,
                     e.have, e.codes)
    rows = e.static[keep] if e.static is not None else static_span_features(e.text, e.sentences, kept, title)
    return kept + gaps, np.vstack([rows, static_span_features(e.text, e.sentences, gaps, title)])


def _dense(question: str, entries: list, bm: np.ndarray, backend, n: int) -> np.ndarray:
    """Cosine of the question with the ``n`` sentences (of all ``entries``, the documents'
    :class:`~answers.doc_cache.DocumentEntry` in order; ``bm`` their BM25) that BM25 ranks first (NaN for the
    others); (n_sentences,) float64."""
    out = np.full(len(bm), np.nan, dtype=np.float64)
    if n <= 0 or not len(bm):
        return out
    flat = [e.text[a:b] for e in entries for a, b in e.sentences]
    top = np.argsort(-bm, kind="stable")[:n]
    qv = backend.embed_queries([question])
    pv = backend.embed_passages([flat[i] for i in top])
    out[top] = pv @ qv[0]
    return out


def rank_answers(prep: Prepared, scorer, k: int, passage_chars: int = 150) -> list[dict]:
    """:func:`read_answers` as JSON objects (:meth:`answers.render.Answer.to_json`: text, score (calibrated),
    raw_score, doc_score, doc_id, external_id, title, url, source, pubtime, start, end, passage, passage_start,
    passage_end, kind, doc_rank, version)."""
    from answers.reader import read_answers

    return [a.to_json() for a in read_answers(prep, scorer, k, passage_chars)]


class Answerer:
    """Answers questions over a data dir's serving index (Python API; the CLI and the web page use it).

    ``answer(question, k)`` reads ``index/CURRENT`` once per call and uses that version throughout: its
    search, encoder, document texts and answer scorer are all parts of the version (:mod:`retrieval.parts`), so
    a refresh during a question never mixes versions and a rollback restores every one of them. Loaded versions
    are kept by their identity (:func:`retrieval.versions.version_key`: an index rebuilt from scratch under the
    same name is loaded anew; the two latest), and so is the question-free part of each document seen (its
    version's :class:`~answers.doc_cache.DocumentCache`; :meth:`warm` fills it up front). Nothing is written
    to the data dir. ``scorer``: a scorer object used instead of the version's (evaluation of a fresh fit).

    Raises (at construction):
        ValueError: the given ``scorer`` was fitted on other features (:func:`answers.scorer.check_features`).
    """

    def __init__(self, data_dir: str | os.PathLike, scorer=None, cfg: AnswerConfig | None = None,
                 tokenizer=None):
        import threading

        from answers.scorer import check_features

        self.data_dir = Path(data_dir)
        # the reader's settings: these when given, else the ones pinned with each version (reader_config)
        self.cfg_override = cfg
        self.cfg = cfg or AnswerConfig()
        self.scorer_override = check_features(scorer) if scorer is not None else None
        self._tokenizer = tokenizer
        self._backends: OrderedDict = OrderedDict()
        self._lock = threading.Lock()

    def backend(self, version: str | None = None):
        """The :class:`~answers.backend.SearchBackend` of ``version`` (default: the serving one), cached by
        the version's identity.

        Raises:
            retrieval.bundle.IndexMissingError: no index published, or ``version`` is not on disk.
        """
        from answers.backend import SearchBackend
        from retrieval.bundle import resolve_version

        root = self.data_dir / "index"
        version, key = resolve_version(root, version)
        with self._lock:
            if key not in self._backends:
                self._backends[key] = SearchBackend(root, version, self._tokenizer)
                while len(self._backends) > 2:
                    self._backends.popitem(last=False)
            return self._backends[key]

    def reader_config(self, backend=None) -> AnswerConfig:
        """The :class:`AnswerConfig` answers of ``backend``'s version (default: the serving one) are read with: the
        one given at construction, else the defaults with the reader settings pinned in the version's reader
        record (:func:`reader_record`, :data:`READER_SETTINGS`; a version published with other settings is
        answered as it was published). Pinned values that are not positive ints are ignored (defaults kept)."""
        if self.cfg_override is not None:
            return self.cfg_override
        pinned = (backend or self.backend()).reader_settings
        ok = {k: v for k, v in pinned.items() if k in READER_SETTINGS and isinstance(v, int)
              and not isinstance(v, bool) and 0 <= v <= 10_000_000}
        return replace(self.cfg, **ok) if ok else self.cfg

    def scorer(self, backend=None):
        """The scorer answers use: the given one, else the serving (or ``backend``'s) version's pinned scorer.

        Raises:
            answers.scorer.ScorerMissingError: the version has no scorer (the reason: refused at publication).
        """
        return self.scorer_override or (backend or self.backend()).scorer

    def store(self):
        """The serving version's documents (:class:`~answers.documents.DocumentStore` of its texts part)."""
        return self.backend().store

    def check(self) -> dict:
        """Load the serving version, its texts and the reader it answers with now (its reader part, or its scorer
        and the answer cross-encoder that scorer reads: :meth:`~answers.backend.SearchBackend.reader`; a serving
        process's start: a missing or refused part is an error before the first request); returns
        ``{version, encoder, documents}``.

        Raises:
            retrieval.bundle.IndexMissingError, retrieval.parts.PartError, answers.scorer.ScorerMissingError,
            ValueError: the part that cannot be served, named.
        """
        backend = self.backend()
        backend.reader(self.scorer_override)
        return {"version": backend.version, "encoder": backend.encoder_name, "documents": len(backend.store.text)}

    def warm(self) -> int:
        """Fill the serving version's document cache (:class:`~answers.doc_cache.DocumentCache`) with every
        document of the version up to its bound, so questions pay only for what depends on them; returns the
        documents built. A serving process calls it once (``flows.serve`` does, beside its first requests)."""
        backend = self.backend()
        return backend.doc_cache.warm(backend.store, backend.tokenize, self.reader_config(backend).max_doc_chars)

    def answer(self, question: str, k: int = 3, filters: dict | None = None, infer_scope: bool | None = None) -> dict:
        """Answers to ``question`` from the serving version's searcher, rerankers and reader
        (:meth:`~answers.backend.SearchBackend.reader`), as JSON (:func:`answers.render.result_json`):
        ``{question, answers (best first, :meth:`answers.render.Answer.to_json`), found (top score >=
        threshold), threshold, version, encoder, seconds}``.

        ``filters`` (``region``, ``level``, ``issuer``, ``from``, ``to``, ``in_force``) and ``infer_scope`` (the
        places the question names scope it when no ``region`` is given) scope the search over the version's
        policy records (:mod:`retrieval.scoped`); the result then has ``scope`` (its fields and ``label``). Neither
        given: unscoped.

        Raises:
            AnswerInputError: bad question or ``k`` (see :func:`check_question`), a bad filter, filters on a
                version without policy records.
            retrieval.bundle.IndexMissingError: no index published.
            answers.scorer.ScorerMissingError: the serving version has no answer scorer.
        """
        import time

        from answers.render import result_json

        t = time.perf_counter()
        q = check_question(question, k, self.cfg)
        backend = self.backend()
        scope, docs, order = _scope(backend, q, filters, bool(infer_scope))
        reader = backend.reader(self.scorer_override)
        cfg = self.reader_config(backend)
        prep = prepare(q, backend, backend.store, cfg, cache=backend.doc_cache, reranker=reader.reranker,
                       docs=docs, order=order)
        answers = with_policy(backend, reader.read(q, prep, k, cfg.passage_chars))
        res = result_json(q, answers, bool(answers) and answers[0].score >= reader.threshold, reader.threshold,
                          backend.version, backend.encoder_name, time.perf_counter() - t)
        return res if scope is None else {**res, "scope": scope}


def with_policy(backend, answers: list) -> list:
    """``answers`` (:class:`answers.render.Answer`) each with ``policy``: its document's record in the version
    (SPEC §2 metadata: jurisdiction, level, issuer, 文号, dates, validity; :func:`retrieval.scoped.policy_fields`)
    and ``links``, its typed links to other documents (:func:`retrieval.scoped.policy_links`: implements /
    repeals / cites / repealed_by, each ``{"type", "title", "doc_id", "url"}``, titles and links of documents
    of the version from its texts). Unchanged on a version without the policy records part."""
    from dataclasses import replace

    from retrieval.policy_records import POLICY_RECORDS
    from retrieval.scoped import policy_fields, policy_links

    if not answers or not backend.bundle.has_part(POLICY_RECORDS):
        return answers
    out = []
    for a in answers:
        links = []
        for link in policy_links(backend.bundle, a.doc_id):
            meta = backend.store.get(link["doc_id"])[1] if link["doc_id"] is not None else {}
            links.append({**link, "title": link["title"] or meta.get("title"), "url": meta.get("url")})
        out.append(replace(a, policy={**policy_fields(backend.bundle, a.doc_id), "links": links}))
    return out


def _scope(backend, question: str, filters: dict | None, infer: bool) -> tuple[dict | None, set[str] | None, object]:
    """``(scope payload, allowed doc ids, reorder)`` of one request (``(None, None, None)``: unscoped, no filters
    asked; the reorder: :func:`retrieval.scoped.scope_order`, None when the scope names no place).

    Raises:
        AnswerInputError: a bad filter, or filters on a version without policy records (the message says which).
    """
    if not filters and not infer:
        return None, None, None
    from retrieval.scoped import request_scope as scope_of, scope_order, scope_payload, scoped_docs
    from retrieval.parts import PartError

    try:
        scope, docs = scoped_docs(backend.bundle, scope_of(question, filters or {}, infer=infer))
    except PartError:
        raise
    except ValueError as exc:
        raise AnswerInputError(str(exc)) from None
    return scope_payload(scope), docs, scope_order(backend.bundle, scope)
