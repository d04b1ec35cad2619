"""Features of documents and candidate spans for one question (SPEC §9).

Document features (is this the document that answers?): its place in the hybrid ranking, its best chunk's
fused, dense and BM25 scores relative to the best document's, how many of the top chunks it holds, how much
of the question its title and its text cover, and its best sentence's BM25 relative to the best of all.

Span features (is this the answer inside that document?): BM25 of the question against every sentence of the
candidate documents (Okapi BM25, Robertson & Zaragoza 2009, with ``bm25s``: IDF over those sentences) for the
span's sentences and the sentences around it, relative to the document's best; the share of the question's
tokens and characters the span (and the span with the sentence before it) contains; cosine similarity with
the index's encoder for the sentences the BM25 ranks first (``dense_sentences``); position; length; kind;
whether a retrieved chunk holds it and that chunk's rank; cues matching the question's type (numbers, dates,
places); and the span's extent within its sentences: how much of the question the words left out of the span
cover (before it and after it: the echo of the question beside the answer), the share of the span's characters
new to the question, whether it starts or ends where its sentence does, its clause count and its length
relative to the question's; and how many characters of the question the text repeats right before and right
after the span and at its edges (:mod:`answers.echo`). All scores enter as ranks or ratios within the question,
so the weights do not depend on the scale of one encoder or one corpus.
"""
from __future__ import annotations

import math
import re
from dataclasses import dataclass, field
from typing import Callable

import numpy as np

from answers.candidates import Span
from answers.echo import ECHO_FEATURES, EchoQuery, echo_matrix
from retrieval.hits import RankedHit


DOC_FEATURES = ("doc_rank_log", "doc_top", "first_hit_log", "n_hits", "fused_rel", "dense_rel", "dense_raw",
                "sparse_rel", "sparse_rank_log", "title_cover", "doc_cover", "best_bm25_rel", "n_sent_log")
SPAN_FEATURES = ("bm25_first", "bm25_max", "bm25_prev", "bm25_next", "bm25_rank_log", "bm25_all_rel", "top_in_doc",
                 "cover", "cover_ctx", "char_cover", "char_cover_ctx", "dense_first", "dense_prev", "dense_rank_log",
                 "pos_rel", "pos_first", "pos_log", "len_log", "kind_sentence", "kind_window2", "kind_window3",
                 "kind_clause", "in_chunk", "chunk_rank_log", "after_colon", "num_cue", "date_cue", "place_cue",
                 "how_len", "enum_start", "title_in_span", "kind_run", "pre_char_cover", "post_char_cover",
                 "new_char_share", "starts_sentence", "ends_sentence", "clauses_log", "len_vs_question",
                 "kind_entity", "kind_gap") + ECHO_FEATURES

# The features an index version's encoder computes (cosines of its vectors, and the fused search score whose
# scale follows the fusion's weights): an encoder-free scorer (AnswerScorer.ignores) reads them as 0, so it
# answers over a version of any encoder (SPEC §9).
ENCODER_FEATURES = ("fused_rel", "dense_rel", "dense_raw", "dense_first", "dense_prev", "dense_rank_log")

_NUM_Q = re.compile(r"多少|几|比例|金额|费用|标准|额度|多长|多久|电话|号码|账号|热线")
_DATE_Q = re.compile(r"什么时候|何时|哪天|日期|时间|截止|期限|起止|多久|哪一天")
_PLACE_Q = re.compile(r"哪里|哪儿|地点|地址|在哪|何处|哪些地方|哪个地方|哪家|哪个医院|哪些医院")
_HOW_Q = re.compile(r"如何|怎样|怎么|哪些|措施|举措|做法|要求|规定|政策|内容")
_DIGIT = re.compile(r"\d|[一二三四五六七八九十百千万]+[元%个天日月年]")
_DATE = re.compile(r"\d+月\d*日?|\d{4}年|[一二三四五六七八九十]+月[一二三四五六七八九十]*日")
_PLACE = re.compile(r"[省市区县镇村路街号楼院]|医院|中心|大厦")
_ENUM = re.compile(r"^[（(]?[一二三四五六七八九十\d]+[）)、.．]")
_CLAUSE_MARK = re.compile(r"[，,；;：:]")
_STOP_CHARS = set("的了是在和与及或等对为有何哪些什么如何怎样怎么吗呢？?，,。、：:；;“”\"'（）() 年月日")


@dataclass(frozen=True)
class Question:
    """A checked question as the features read it, each form computed once per question: ``text``; ``tokens``
    (the index's BM25 tokens, repeats kept as BM25 counts them) and ``token_set``; ``chars`` (its content
    characters, :func:`question_chars`); ``echo`` (what :func:`answers.echo.echo_matrix` reads of it)."""

    text: str
    tokens: tuple[str, ...]
    token_set: frozenset
    chars: frozenset
    echo: EchoQuery

    @classmethod
    def of(cls, text: str, tokenize: Callable[[list[str]], list[list[str]]]) -> "Question":
        """The question ``text`` (already checked: :func:`answers.answer.check_question`) segmented by
        ``tokenize``, the index's segmenter (the one call per question on the answer side)."""
        tokens = tuple(tokenize([text])[0])
        return cls(text, tokens, frozenset(tokens), frozenset(question_chars(text)), EchoQuery.of(text))


@dataclass(frozen=True)
class DocCandidates:
    """One candidate document of one question (SPEC §9), built once with all its fields: ``doc_id``; ``hits``
    (its chunks among the search's top ``search_k``: :class:`~retrieval.hits.RankedHit` s, each the search's
    :class:`~retrieval.hits.SearchHit` with ``rank``, its 0-based place in that list), ``first_hit`` (the rank
    of its best chunk) and ``extra`` (added after the retrieved documents, with no hits: training's gold
    document); ``meta`` (title, url, source, …); ``entry``, its question-free
    part (:class:`~answers.doc_cache.DocumentEntry`: text, sentences, tokens, code points, normalised text);
    the question's ``bm`` (BM25, (n_sentences,) float32) and ``dense`` (cosine, (n_sentences,) float64, NaN
    where not computed) per sentence; and the candidate ``spans`` scored for it with ``static``
    ((n_spans, |STATIC|) float64) their question-free features (:func:`static_span_features`)."""

    doc_id: str
    hits: list[RankedHit]
    first_hit: int
    extra: bool
    meta: dict
    entry: "answers.doc_cache.DocumentEntry"  # by name only: doc_cache imports this module
    bm: np.ndarray
    dense: np.ndarray
    spans: list[Span]
    static: np.ndarray

    @property
    def text(self) -> str:
        """The cleaned document text (the spans' and hits' offsets point into it)."""
        return self.entry.text

    @property
    def sentences(self) -> list[tuple[int, int]]:
        """(start, end) offsets of the sentences ``bm`` and ``dense`` score (a long document: those near its
        hits)."""
        return self.entry.sentences


@dataclass
class Prepared:
    """One question's candidates: ``docs`` (:class:`DocCandidates`, best first), and the matrices ``doc_x``
    (n_docs, |DOC_FEATURES|) and ``span_x`` (n_spans, |SPAN_FEATURES|) with ``span_doc`` (n_spans,) the
    document index of each span and ``spans`` (n_spans,) the spans themselves (those of ``docs`` in order)."""

    question: str
    docs: list[DocCandidates]
    doc_x: np.ndarray
    span_x: np.ndarray
    span_doc: np.ndarray
    spans: list[Span] = field(default_factory=list)


def by_name(columns: dict, names: tuple[str, ...], rows: int, dtype=np.float32) -> np.ndarray:
    """(rows, len(names)) ``dtype``: ``columns`` (name → a value per row, or one value for all) stacked in
    the order of ``names``, so a feature's column is where its declared name says.

    Raises:
        ValueError: the columns' names are not exactly ``names`` (one missing, one extra).
    """
    if columns.keys() != set(names) or len(set(names)) != len(names):
        raise ValueError(f"feature columns differ from the declared names: missing {sorted(set(names) - columns.keys())},"
                         f" undeclared {sorted(columns.keys() - set(names))}")
    out = np.empty((rows, len(names)), dtype=dtype)
    for c, name in enumerate(names):
        out[:, c] = columns[name]
    return out


def _cover(q: set[str], toks: set[str]) -> float:
    return len(q & toks) / len(q) if q else 0.0


def _rel(v: np.ndarray, best: float) -> np.ndarray:
    return v / best if best > 0 else np.zeros_like(v)


def doc_features(docs: list[DocCandidates], q: Question, best_bm25: np.ndarray) -> np.ndarray:
    """(n_docs, |DOC_FEATURES|) float32 for the candidate documents ``docs`` (best first), ``best_bm25``
    (n_docs,) each one's best sentence BM25."""
    if not docs:
        return np.zeros((0, len(DOC_FEATURES)), dtype=np.float32)
    fused = np.array([max((r.hit.score for r in d.hits), default=0.0) for d in docs], dtype=float)
    dense = np.array([max(((r.hit.dense_score or 0.0) for r in d.hits), default=0.0) for d in docs], dtype=float)
    sparse = np.array([max(((r.hit.sparse_score or 0.0) for r in d.hits), default=0.0) for d in docs], dtype=float)
    s_rank = [min(((r.hit.sparse_rank or 101) for r in d.hits), default=101) for d in docs]
    return by_name({"doc_rank_log": [math.log1p(g) for g in range(len(docs))],
                    "doc_top": [float(g == 0) for g in range(len(docs))],
                    "first_hit_log": [math.log1p(d.first_hit) for d in docs], "n_hits": [len(d.hits) for d in docs],
                    "fused_rel": _rel(fused, fused.max()), "dense_rel": dense - dense.max(), "dense_raw": dense,
                    "sparse_rel": _rel(sparse, sparse.max()), "sparse_rank_log": [math.log1p(r) for r in s_rank],
                    "title_cover": [_cover(q.token_set, d.entry.title_tokens) for d in docs],
                    "doc_cover": [_cover(q.token_set, d.entry.all_tokens) for d in docs],
                    "best_bm25_rel": _rel(best_bm25, best_bm25.max()),
                    "n_sent_log": [math.log1p(len(d.sentences)) for d in docs]}, DOC_FEATURES, len(docs))


def _cues(question: str) -> tuple[bool, bool, bool, bool]:
    return (bool(_NUM_Q.search(question)), bool(_DATE_Q.search(question)), bool(_PLACE_Q.search(question)),
            bool(_HOW_Q.search(question)))


STATIC = ("first", "last", "start", "end", "pos_rel", "pos_first", "pos_log", "len", "len_log", "kind_sentence",
          "kind_window2", "kind_window3", "kind_clause", "after_colon", "digit", "date", "place", "enum_start",
          "title_in_span", "kind_run", "starts_sentence", "ends_sentence", "clauses_log", "kind_entity", "kind_gap",
          "distinct_chars")


def static_span_features(text: str, sents: list[tuple[int, int]], spans: list[Span], title: str) -> np.ndarray:
    """(n_spans, |STATIC|) float64: what of each span does not depend on the question (its place, length,
    kind, punctuation, the cue patterns it holds), computed once per document (:mod:`answers.doc_cache`)."""
    rows = [_static_row(text, sents, sp, title) for sp in spans]
    return by_name({k: [r[k] for r in rows] for k in (rows[0] if rows else STATIC)}, STATIC, len(spans), np.float64)


def _static_row(text: str, sents: list[tuple[int, int]], sp: Span, title: str) -> dict:
    """The :data:`STATIC` features of one span, by name."""
    n, i, j, t = len(sents), sp.first, sp.last, text[sp.start:sp.end]
    pre, post = text[sents[i][0]:sp.start], text[sp.end:sents[j][1]]
    return {"first": i, "last": j, "start": sp.start, "end": sp.end, "pos_rel": i / max(n - 1, 1),
            "pos_first": float(i == 0), "pos_log": math.log1p(i), "len": len(t), "len_log": math.log1p(len(t)),
            "kind_sentence": float(sp.kind == "sentence"), "kind_window2": float(sp.kind == "window" and j - i == 1),
            "kind_window3": float(sp.kind == "window" and j - i >= 2), "kind_clause": float(sp.kind == "clause"),
            "after_colon": float(text[max(sp.start - 1, 0):sp.start] in ("：", ":")
                                 or (i > 0 and text[sents[i - 1][1] - 1] in "：:")),
            "digit": float(bool(_DIGIT.search(t))), "date": float(bool(_DATE.search(t))),
            "place": float(bool(_PLACE.search(t))), "enum_start": float(bool(_ENUM.match(t))),
            "title_in_span": float(bool(title) and title[:12] in t), "kind_run": float(sp.kind == "run"),
            "starts_sentence": float(not pre.strip()), "ends_sentence": float(not post.strip(" 。！？；;!?\u3000\n")),
            "clauses_log": math.log1p(len(_CLAUSE_MARK.findall(t))), "kind_entity": float(sp.kind == "entity"),
            "kind_gap": float(sp.kind == "gap"), "distinct_chars": len(set(t))}


def _presence(codes: np.ndarray, chars: list[str], a: np.ndarray, b: np.ndarray) -> np.ndarray:
    """(len(chars), len(a)) bool: whether each char occurs in ``text[a_k:b_k]`` (``codes``: the text's code
    points), by prefix counts."""
    if not chars:
        return np.zeros((0, len(a)), dtype=bool)
    q = np.fromiter((ord(c) for c in chars), dtype=codes.dtype, count=len(chars))
    cum = np.zeros((len(chars), len(codes) + 1), dtype=np.int32)
    np.cumsum(codes[None, :] == q[:, None], axis=1, out=cum[:, 1:])
    return (cum[:, b] - cum[:, a]) > 0


def _ranks(score: np.ndarray) -> np.ndarray:
    rank = np.empty(len(score), dtype=int)
    rank[np.argsort(-score, kind="stable")] = np.arange(len(score))
    return rank


def _sentence_arrays(d: DocCandidates, best_all: float, qt: list[str]) -> dict:
    """Per-sentence arrays of one document for :func:`span_matrix`: BM25 relative to the document's best and
    to the best of all, rank within the document, cosine minus the document's best (NaN where not computed)
    and its rank, and which question tokens each sentence holds."""
    n = len(d.sentences)
    bm = np.asarray(d.bm, dtype=np.float32)
    best = float(bm.max()) if n else 0.0
    dense = np.asarray(d.dense, dtype=np.float64)
    have = ~np.isnan(dense)
    drank = np.full(n, n, dtype=int)
    drank[have] = _ranks(dense[have])
    return {"rel": (bm / best) if best > 0 else np.zeros(n, dtype=np.float32),
            "rel_all": (bm / best_all) if best_all > 0 else np.zeros(n, dtype=np.float32), "rank": _ranks(bm),
            "dense": dense - (float(dense[have].max()) if have.any() else 0.0), "drank": drank,
            "tok": np.array([[t in st for t in qt] for st in d.entry.sent_tokens], dtype=np.int32).reshape(n, len(qt)),
            "sa": np.array([a for a, _ in d.sentences], dtype=int).reshape(n),
            "se": np.array([e for _, e in d.sentences], dtype=int).reshape(n)}


# the question-free span features that enter the span matrix as they are
_AS_IS = ("pos_rel", "pos_first", "pos_log", "len_log", "kind_sentence", "kind_window2", "kind_window3", "kind_clause",
          "after_colon", "enum_start", "title_in_span", "kind_run", "starts_sentence", "ends_sentence", "clauses_log",
          "kind_entity", "kind_gap")


@dataclass(frozen=True)
class _Layout:
    """The spans of several documents laid end to end (:func:`span_matrix`): ``S`` their :data:`STATIC` columns
    by name, ``doc_of`` (n_spans,) their document; per sentence of all documents in order ``cat`` (the arrays of
    :func:`_sentence_arrays` concatenated; ``sa``/``se`` shifted onto the joined texts) and ``last_in_doc``;
    per span ``i``/``j`` (its first and last sentence in that order), ``first`` (it opens its document) and
    ``start``/``end`` (offsets into the joined texts, ``tb`` (n_docs + 1,) where each text starts)."""

    S: dict
    doc_of: np.ndarray
    cat: dict
    last_in_doc: np.ndarray
    i: np.ndarray
    j: np.ndarray
    first: np.ndarray
    start: np.ndarray
    end: np.ndarray
    tb: np.ndarray

    @classmethod
    def of(cls, docs: list[DocCandidates], best_all: float, qt: list[str]) -> "_Layout":
        per = [_sentence_arrays(d, best_all, qt) for d in docs]
        n_sent = np.array([len(d.sentences) for d in docs], dtype=int)
        sb = np.concatenate([[0], np.cumsum(n_sent)])
        tb = np.concatenate([[0], np.cumsum([len(d.entry.codes) for d in docs])])
        static = np.vstack([d.static for d in docs]) if docs else np.zeros((0, len(STATIC)))
        doc_of = np.repeat(np.arange(len(docs)), [len(d.static) for d in docs])
        S = {k: static[:, c] for c, k in enumerate(STATIC)}
        cat = {k: np.concatenate([p[k] for p in per]) if per else np.zeros((0, len(qt)) if k == "tok" else 0)
               for k in ("rel", "rel_all", "rank", "dense", "drank", "tok", "sa", "se")}
        cat["sa"], cat["se"] = cat["sa"] + np.repeat(tb[:-1], n_sent), cat["se"] + np.repeat(tb[:-1], n_sent)
        li, lj = S["first"].astype(int), S["last"].astype(int)
        return cls(S, doc_of, cat, lj + 1 >= n_sent[doc_of], li + sb[doc_of], lj + sb[doc_of], li == 0,
                   S["start"].astype(int) + tb[doc_of], S["end"].astype(int) + tb[doc_of], tb)


def span_matrix(q: Question, docs: list[DocCandidates], best_all: float, n_hits_total: int) -> np.ndarray:
    """(n_spans, |SPAN_FEATURES|) float32 for the spans of ``docs`` in order (:class:`DocCandidates`: each
    document's ``static`` rows, the question's ``bm`` and ``dense`` per sentence, its ``hits``, and of its entry
    the sentences, their token sets, the code points and the normalised text); ``best_all``: the best sentence
    BM25 of all the question's documents; ``n_hits_total``: the chunks searched (a span in none of them reads
    the rank after the last). Vectorised over the spans of all documents at once (:class:`_Layout`): sentence
    indices and text offsets are shifted onto the documents laid end to end, so nothing reads across a
    document's edge (a span's "sentence before" exists only inside its document)."""
    L = _Layout.of(docs, best_all, sorted(q.token_set))
    S = L.S
    num_q, date_q, place_q, how_q = _cues(q.text)
    return by_name({**_bm25_columns(L), **_dense_columns(L), **_token_columns(L, len(q.token_set)),
                    **_char_columns(L, docs, sorted(q.chars)), **_chunk_columns(L, docs, n_hits_total),
                    **{k: S[k] for k in _AS_IS}, "num_cue": num_q * S["digit"], "date_cue": date_q * S["date"],
                    "place_cue": place_q * S["place"], "how_len": float(how_q) * S["len_log"],
                    "len_vs_question": np.log((S["len"] + 1) / (len(q.text) + 1)), **_echo_columns(q, docs, L)},
                   SPAN_FEATURES, len(L.i))


def _bm25_columns(L: _Layout) -> dict:
    """BM25 of the span's first sentence, its best, the sentences before and after it (relative to the
    document's best; 0 where there is none), its rank in the document and relative to the best of all."""
    i, j, rel, rank = L.i, L.j, L.cat["rel"], L.cat["rank"]
    N = len(rel)
    relx = np.append(rel, np.float32(0.0))  # index N reads 0: no sentence before / after in the document
    return {"bm25_first": rel[i], "bm25_max": np.maximum.reduce([rel[i], rel[np.minimum(i + 1, j)], rel[j]]),
            "bm25_prev": relx[np.where(L.first, N, i - 1)], "bm25_next": relx[np.where(L.last_in_doc, N, j + 1)],
            "bm25_rank_log": np.log1p(rank[i]), "bm25_all_rel": L.cat["rel_all"][i], "top_in_doc": rank[i] == 0}


def _dense_columns(L: _Layout) -> dict:
    """Cosine of the span's first sentence and of the one before (minus the document's best; -1 where not
    computed or none) and the first sentence's cosine rank."""
    i, dense = L.i, L.cat["dense"]
    dprev = dense[np.where(L.first, i, i - 1)]
    return {"dense_first": np.where(np.isnan(dense[i]), -1.0, dense[i]),
            "dense_prev": np.where(L.first | np.isnan(dprev), -1.0, dprev),
            "dense_rank_log": np.log1p(L.cat["drank"][i])}


def _token_columns(L: _Layout, n_tokens: int) -> dict:
    """The share of the question's distinct tokens the span's sentences hold (and with the sentence before):
    the tokens per sentence OR-ed over each span's sentences by prefix sums."""
    i, j, m = L.i, L.j, len(L.i)
    ctok = np.vstack([np.zeros((1, n_tokens), dtype=np.int32), np.cumsum(L.cat["tok"], axis=0)])
    nq_tok = n_tokens or 1
    return {"cover": ((ctok[j + 1] - ctok[i]) > 0).sum(1) / nq_tok if n_tokens else np.zeros(m),
            "cover_ctx": ((ctok[j + 1] - ctok[np.where(L.first, i, i - 1)]) > 0).sum(1) / nq_tok if n_tokens
            else np.zeros(m)}


def _char_columns(L: _Layout, docs: list[DocCandidates], qc: list[str]) -> dict:
    """The question's content characters ``qc`` in the span, with the sentence before, and in the parts of its
    sentences left out of it (before, after); the share of the span's distinct characters new to them."""
    i, j, m, sa, se = L.i, L.j, len(L.i), L.cat["sa"], L.cat["se"]
    nq = len(qc) or 1
    codes = np.concatenate([d.entry.codes for d in docs]) if docs else np.zeros(0, dtype=np.uint32)
    pa, pb = np.where(L.first, 0, sa[i - 1]), np.where(L.first, 0, se[i - 1])
    pres = _presence(codes, qc, np.concatenate([L.start, pa, sa[i], L.end]), np.concatenate([L.end, pb, L.start, se[j]]))
    in_span, in_prev, in_pre, in_post = pres[:, :m], pres[:, m:2 * m], pres[:, 2 * m:3 * m], pres[:, 3 * m:]
    got, distinct = in_span.sum(0), L.S["distinct_chars"]
    return {"char_cover": got / len(qc) if qc else np.zeros(m),
            "char_cover_ctx": (in_span | in_prev).sum(0) / len(qc) if qc else np.zeros(m),
            "pre_char_cover": in_pre.sum(0) / nq, "post_char_cover": in_post.sum(0) / nq,
            "new_char_share": np.where(distinct > 0, (distinct - got) / np.maximum(distinct, 1), 0.0)}


def _chunk_columns(L: _Layout, docs: list[DocCandidates], n_hits_total: int) -> dict:
    """Whether a retrieved chunk holds the span's start, and the log of the best such chunk's rank (of
    ``n_hits_total + 1`` where none does)."""
    none = np.iinfo(np.int64).max
    rank_c = np.full(len(L.i), none, dtype=np.int64)
    for g, d in enumerate(docs):
        for r in d.hits:
            inside = (L.start >= r.hit.start + L.tb[g]) & (L.start < r.hit.end + L.tb[g])
            rank_c = np.where(inside, np.minimum(rank_c, r.rank), rank_c)
    in_chunk = rank_c != none
    return {"in_chunk": in_chunk, "chunk_rank_log": np.log1p(np.where(in_chunk, rank_c, n_hits_total + 1))}


def _echo_columns(q: Question, docs: list[DocCandidates], L: _Layout) -> dict:
    """The question's echo beside and at the edges of each span (:func:`answers.echo.echo_matrix`), by name."""
    echo = np.zeros((len(L.i), len(ECHO_FEATURES)), dtype=np.float32)
    for g, d in enumerate(docs):
        rows = L.doc_of == g
        echo[rows] = echo_matrix(q.echo, d.entry.norm, d.entry.norm_at, L.S["start"][rows].astype(np.int64),
                                 L.S["end"][rows].astype(np.int64))
    return {name: echo[:, k] for k, name in enumerate(ECHO_FEATURES)}


def question_chars(question: str) -> set[str]:
    """The question's content characters (function words, question words and punctuation left out)."""
    return {c for c in question if c not in _STOP_CHARS and not c.isspace()}


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
