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
"""
from __future__ import annotations

import os
import unicodedata
from collections import OrderedDict
from dataclasses import dataclass
from pathlib import Path

import numpy as np

from answers.candidates import gap_spans, sentence_offsets
from answers.decode import mbr_choice
from answers.features import (STATIC, Prepared, doc_features, question_chars, sentence_bm25, span_matrix,
                              static_span_features)


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


def check_question(question, k, cfg: AnswerConfig = AnswerConfig()) -> str:
    """The question stripped, after the checks of the search (``retrieval.query.check_query``: empty, too
    long, ``k`` out of range) plus one of its own: a question must hold a letter or a digit.

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


def group_hits(hits: list[dict], max_docs: int) -> list[dict]:
    """Hits grouped by document in order of each document's best hit: ``[{doc_id, hits, first_hit}]``."""
    groups: OrderedDict = OrderedDict()
    for rank, h in enumerate(hits):
        g = groups.setdefault(h["doc_id"], {"doc_id": h["doc_id"], "hits": [], "first_hit": rank})
        h = {**h, "rank": rank}
        g["hits"].append(h)
    return list(groups.values())[:max_docs]


def _text_of(doc: dict, store) -> tuple[str, dict]:
    """The cleaned text of a grouped document and its metadata. When the store's text does not hold the
    retrieved chunks at their offsets (documents refreshed after the index version was built), a text made of
    the chunks placed at their offsets (blanks elsewhere), so offsets stay those of the version's text."""
    text, meta = store.get(doc["doc_id"])
    hits = doc["hits"]
    if text is not None and all(text[h["start"]:h["end"]].strip() == h["text"] for h in hits):
        return text, meta
    buf = [" "] * max([h["start"] + len(h["text"]) for h in hits] + [0])
    for h in hits:
        buf[h["start"]:h["start"] + len(h["text"])] = list(h["text"])
    first = hits[0] if hits else {}
    return "".join(buf), {c: meta.get(c) or first.get(c) for c in ("title", "url", "source", "pubtime", "external_id")}


def _entry(d: dict, backend, cfg: AnswerConfig, cache):
    """The :class:`~answers.doc_cache.DocumentEntry` of a grouped document: from ``cache`` when the whole
    document is read; built for this question alone when only the sentences near its retrieved chunks are
    (documents over ``max_doc_chars``)."""
    from answers.doc_cache import build_entry

    text, title, hits = d["text"], d["meta"].get("title") or "", d["hits"]
    if len(text) > cfg.max_doc_chars and hits:
        sents = [s for s in sentence_offsets(text) if any(h["start"] - cfg.margin <= s[0] < h["end"] + cfg.margin
                                                           for h in hits)]
        return build_entry(text, title, sents, backend.tokenize)
    if cache is None:
        return build_entry(text, title, sentence_offsets(text), backend.tokenize)
    return cache.get(d["doc_id"], text, title, backend.tokenize)


def prepare(question: str, backend, store, cfg: AnswerConfig = AnswerConfig(), extra_doc: str | None = None,
            cache=None) -> Prepared:
    """Retrieve, group, split and featurise one (checked) question. ``extra_doc``: a document added after the
    retrieved ones when missing (training: the gold document), with no hits. ``cache``: a
    :class:`~answers.doc_cache.DocumentCache` for the question-free part of each document (features are the
    same with or without it)."""
    hits = backend.search(question, cfg.search_k)
    docs = group_hits(hits, cfg.max_docs)
    if extra_doc is not None and all(d["doc_id"] != extra_doc for d in docs):
        docs.append({"doc_id": extra_doc, "hits": [], "first_hit": cfg.search_k, "extra": True})
    q_tok_list = backend.tokenize([question])[0]
    entries = []
    for d in docs:
        d["text"], d["meta"] = _text_of(d, store)
        e = _entry(d, backend, cfg, cache)
        entries.append(e)
        d["sentences"], d["codes"], d["norm"], d["norm_at"] = e.sentences, e.codes, e.norm, e.norm_at
        d["sent_tokens"], d["all_tokens"], d["title_tokens"] = e.sent_tokens, e.all_tokens, e.title_tokens
    bm = sentence_bm25(q_tok_list, [c for e in entries for c in e.sent_counts],
                       np.concatenate([e.sent_lens for e in entries] or [np.zeros(0)]))
    dense = _dense(question, docs, bm, backend, cfg.dense_sentences)
    pos, best = 0, []
    for d in docs:
        n = len(d["sentences"])
        d["bm"], d["dense"] = bm[pos:pos + n], dense[pos:pos + n]
        best.append(float(d["bm"].max()) if n else 0.0)
        pos += n
    best_all = max(best) if best else 0.0
    q_tok, q_chars = set(q_tok_list), question_chars(question)
    statics = [_focused(question, d, e, cfg) for d, e in zip(docs, entries)]
    span_x = span_matrix(question, docs, statics, best_all, q_tok, q_chars, cfg.search_k)
    span_doc = np.concatenate([np.full(len(d["spans"]), g, dtype=int) for g, d in enumerate(docs)] or [np.zeros(0, int)])
    spans = [sp for d in docs for sp in d["spans"]]
    for d in docs:
        del d["codes"], d["norm_at"]  # keep the result plain data
    return Prepared(question, docs, doc_features(docs, q_tok, [d["title_tokens"] for d in docs], np.asarray(best)),
                    span_x, span_doc, spans)


def _focused(question: str, d: dict, e, cfg: AnswerConfig) -> np.ndarray:
    """Set ``d["spans"]`` to the cached candidates of the focused sentences (:func:`focus_sentences`; a sentence
    that is itself a question, :func:`answers.candidates.is_question`, never is) plus the question's gaps there;
    returns their question-free feature rows."""
    focus = focus_sentences(d["bm"], cfg.focus_sentences, cfg.focus_after) & ~e.asks  # questions never answer
    keep = np.flatnonzero(focus[e.static[:, STATIC.index("first")].astype(int)]) if len(e.spans) else np.zeros(0, int)
    gaps = gap_spans(e.text, [se if focus[i] else (se[0], se[0]) for i, se in enumerate(e.sentences)], question,
                     e.have, e.codes)
    d["spans"] = [e.spans[i] for i in keep] + gaps
    return np.vstack([e.static[keep], static_span_features(e.text, e.sentences, gaps, d["meta"].get("title") or "")])


def focus_sentences(bm: np.ndarray, top: int, after: int) -> np.ndarray:
    """(n_sentences,) bool: the ``top`` sentences of a document the question's BM25 ranks first and the
    ``after`` sentences following each (an answer often follows the sentence that echoes the question: a
    heading, a lead-in); all when ``top`` is 0. The first stage of a cascade (Wang, Lin & Metzler 2011): only
    these sentences' spans reach the learned ranker. On the NCPQA questions (gold document retrieved) the top 3
    and the one after each hold the gold span's sentence 94 % of the time with 38 % of a document's sentences
    (top 5: 97 % with 53 %); 3 × 5-fold cross-validation by document on the training questions gives the same
    hit@1 and char-F1 with the top 3, 4 or 5 (with 34 % fewer spans scored at 3 than at 5)."""
    n = len(bm)
    if top <= 0 or n <= top:
        return np.ones(n, dtype=bool)
    keep = np.zeros(n, dtype=bool)
    for i in np.argsort(-np.asarray(bm), kind="stable")[:top]:
        keep[i:min(n, i + after + 1)] = True
    return keep


def _dense(question: str, docs: list[dict], bm: np.ndarray, backend, n: int) -> np.ndarray:
    """Cosine of the question with the ``n`` sentences (of all ``docs``, in order; ``bm`` their BM25) that BM25
    ranks first (NaN for the others)."""
    out = np.full(len(bm), np.nan, dtype=np.float64)
    if n <= 0 or not len(bm):
        return out
    flat = [d["text"][s:e] for d in docs for s, e in d["sentences"]]
    top = np.argsort(-bm, kind="stable")[:n]
    qv = backend.embed_queries([question])
    pv = backend.embed_passages([flat[i] for i in top])
    out[top] = pv @ qv[0]
    return out


def passage(text: str, start: int, end: int, chars: int) -> tuple[int, int]:
    """(start, end) of the passage shown around ``text[start:end]``: ``chars`` on each side, widened to the
    nearest sentence or line boundary within that reach."""
    a = max(0, start - chars)
    cut = max(text.rfind(m, a, start) for m in "。！？；\n")
    a = cut + 1 if cut >= a else a
    b = min(len(text), end + chars)
    ends = [i for i in (text.find(m, end, b) for m in "。！？；\n") if i >= 0]
    b = max(ends) + 1 if ends else b
    return a, b


def rank_answers(prep: Prepared, scorer, k: int, passage_chars: int = 150) -> list[dict]:
    """The best span of each document, best first (at most ``k``): each document's span is the scorer's
    minimum-Bayes-risk choice among its spans (:mod:`answers.decode`; the argmax when the scorer's
    ``mbr_temperature`` is 0), its raw score that of the document's best-scored span (documents are ranked and
    calibrated by it). Dicts with text, score (calibrated), raw_score, doc_score, doc_id, external_id, title,
    url, source, pubtime, start, end, passage, passage_start, passage_end, kind, doc_rank."""
    if not prep.spans:
        return []
    p_doc, raw = scorer.raw_scores(prep.doc_x, prep.span_x, prep.span_doc)
    best = {}  # document -> (its level: its best span's raw score, its spans)
    for g, d in enumerate(prep.docs):
        idx = np.flatnonzero(prep.span_doc == g)
        if not d.get("extra") and len(idx):
            best[g] = (float(raw[idx].max()), idx)
    out = []
    for g in sorted(best, key=lambda g: -best[g][0])[:k]:  # stable: ties keep the retrieval order
        d, (level, idx) = prep.docs[g], best[g]
        pick = idx[mbr_choice([prep.spans[i].start for i in idx], [prep.spans[i].end for i in idx], raw[idx],
                              scorer.mbr_temperature)]
        sp = prep.spans[pick]
        pa, pb = passage(d["text"], sp.start, sp.end, passage_chars)
        out.append({"text": d["text"][sp.start:sp.end], "score": float(scorer.calibrate(level)),
                    "raw_score": level, "doc_score": float(p_doc[g]), "doc_id": d["doc_id"],
                    **{c: d["meta"].get(c) for c in ("external_id", "title", "url", "source", "pubtime")},
                    "start": sp.start, "end": sp.end, "passage": d["text"][pa:pb], "passage_start": pa,
                    "passage_end": pb, "kind": sp.kind, "doc_rank": g + 1})
    return out


class Answerer:
    """Answers questions over a data dir's serving index (Python API; the CLI and the web page use it).

    ``answer(question, k)`` reads ``index/CURRENT`` once per call and uses that version's search, encoder and
    chunks throughout (a refresh during a question never mixes versions); versions and the cleaned documents
    are loaded once and kept (the two latest versions), and so is the question-free part of each document seen
    (its version's :class:`~answers.doc_cache.DocumentCache`; :meth:`warm` fills it up front). Nothing is
    written to the data dir.

    Raises (at construction):
        answers.scorer.ScorerMissingError: no fitted scorer (``scorer`` not given and none found).
        ValueError: the scorer was fitted on other features (:func:`answers.scorer.check_features`).
    """

    def __init__(self, data_dir: str | os.PathLike, scorer=None, cfg: AnswerConfig = AnswerConfig(),
                 scorer_path: str | os.PathLike | None = None, tokenizer=None):
        import threading

        from answers.scorer import check_features, load_scorer

        self.data_dir = Path(data_dir)
        self.cfg = cfg
        self.scorer = check_features(scorer) if scorer is not None else load_scorer(self.data_dir, scorer_path)
        self._tokenizer = tokenizer
        self._backends: OrderedDict = OrderedDict()
        self._store: tuple[str, object] | None = None
        self._lock = threading.Lock()

    def backend(self, version: str | None = None):
        """The :class:`~answers.backend.SearchBackend` of ``version`` (default: the serving one), cached."""
        from answers.backend import SearchBackend, serving_version

        version = version or serving_version(self.data_dir / "index")
        with self._lock:
            if version not in self._backends:
                self._backends[version] = SearchBackend(self.data_dir / "index", version, self._tokenizer)
                while len(self._backends) > 2:
                    self._backends.popitem(last=False)
            return self._backends[version]

    def store(self):
        """The cleaned documents (reloaded when ``documents_clean`` was swapped for a new table)."""
        from answers.documents import DocumentStore

        real = os.path.realpath(self.data_dir / "documents_clean")
        with self._lock:
            if self._store is None or self._store[0] != real:
                self._store = (real, DocumentStore(real))
            return self._store[1]

    def warm(self) -> int:
        """Fill the serving version's document cache (:class:`~answers.doc_cache.DocumentCache`) with every
        cleaned document up to its bound, so questions pay only for what depends on them; returns the documents
        built. A serving process calls it once (``flows.serve`` does, beside its first requests)."""
        backend = self.backend()
        return backend.doc_cache.warm(self.store(), backend.tokenize, self.cfg.max_doc_chars)

    def answer(self, question: str, k: int = 3) -> dict:
        """Answers to ``question``: ``{question, answers (best first, see rank_answers), found (top score >=
        threshold), threshold, version, encoder, seconds}``.

        Raises:
            AnswerInputError: bad question or ``k`` (see :func:`check_question`).
            answers.backend.IndexMissingError: no index published.
        """
        import time

        t = time.perf_counter()
        q = check_question(question, k, self.cfg)
        backend = self.backend()
        prep = prepare(q, backend, self.store(), self.cfg, cache=backend.doc_cache)
        answers = rank_answers(prep, self.scorer, k, self.cfg.passage_chars)
        return {"question": q, "answers": answers,
                "found": bool(answers) and answers[0]["score"] >= self.scorer.threshold,
                "threshold": self.scorer.threshold, "version": backend.version, "encoder": backend.encoder_name,
                "seconds": time.perf_counter() - t}
