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

import numpy as np

from answers.candidates import Span
from answers.echo import ECHO_FEATURES, EchoQuery, echo_matrix

DOC_FEATURES = ("doc_rank_log", "doc_top", "first_hit_log", "n_hits", "fused_rel", "dense_rel", "dense_raw",
                "sparse_rel", "sparse_rank_log", "title_cover", "doc_cover", "best_bm25_rel", "n_sent_log")
SPAN_FEATURES = ("bm25_first", "bm25_max", "bm25_prev", "bm25_next", "bm25_rank_log", "bm25_all_rel", "top_in_doc",
                 "cover", "cover_ctx", "char_cover", "char_cover_ctx", "dense_first", "dense_prev", "dense_rank_log",
                 "pos_rel", "pos_first", "pos_log", "len_log", "kind_sentence", "kind_window2", "kind_window3",
                 "kind_clause", "in_chunk", "chunk_rank_log", "after_colon", "num_cue", "date_cue", "place_cue",
                 "how_len", "enum_start", "title_in_span", "kind_run", "pre_char_cover", "post_char_cover",
                 "new_char_share", "starts_sentence", "ends_sentence", "clauses_log", "len_vs_question",
                 "kind_entity", "kind_gap") + ECHO_FEATURES

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


@dataclass
class Prepared:
    """One question's candidates: ``docs`` (one dict per retrieved document, best first, with ``text``,
    ``meta``, ``hits``, ``sentences`` offsets and ``spans``), and the matrices ``doc_x`` (n_docs, |DOC_FEATURES|)
    and ``span_x`` (n_spans, |SPAN_FEATURES|) with ``span_doc`` (n_spans,) the document index of each span."""

    question: str
    docs: list[dict]
    doc_x: np.ndarray
    span_x: np.ndarray
    span_doc: np.ndarray
    spans: list[Span] = field(default_factory=list)


def _cover(q: set[str], toks: set[str]) -> float:
    return len(q & toks) / len(q) if q else 0.0


def _rel(v: np.ndarray, best: float) -> np.ndarray:
    return v / best if best > 0 else np.zeros_like(v)


def sentence_bm25(q_tokens: list[str], sent_counts: list[dict], sent_lens: np.ndarray, k1: float = 1.5,
                  b: float = 0.75) -> np.ndarray:
    """BM25, Lucene variant (Robertson & Zaragoza 2009; idf = ln(1 + (N − df + 0.5)/(df + 0.5)), tf part
    tf/(tf + k1·(1 − b + b·len/avg len))), of the question against each sentence, IDF over these sentences;
    ``sent_counts``: a token → count dict per sentence, ``sent_lens`` (n,) their token counts (an empty
    sentence counts as one token, as ``bm25s`` indexes it); each question token counts as often as it occurs
    (``bm25s.BM25(method="lucene").get_scores`` scores the same, float32, to rounding). (n_sentences,) float32,
    zeros when nothing matches."""
    n = len(sent_counts)
    out = np.zeros(n, dtype=np.float64)
    if not n:
        return out.astype(np.float32)
    lens = np.maximum(np.asarray(sent_lens, dtype=np.float64), 1.0)
    norm = k1 * ((1 - b) + b * lens / lens.mean())
    for t in q_tokens:
        if not t:
            continue
        tf = np.fromiter((c.get(t, 0) for c in sent_counts), dtype=np.float64, count=n)
        df = np.count_nonzero(tf)
        if df:
            out += math.log(1 + (n - df + 0.5) / (df + 0.5)) * tf / (norm + tf)
    return out.astype(np.float32)


def doc_features(docs: list[dict], q_tok: set[str], title_tok: list[set[str]], best_bm25: np.ndarray) -> np.ndarray:
    """(n_docs, |DOC_FEATURES|) for the grouped hits ``docs`` (see :class:`Prepared`)."""
    fused = np.array([max((h["score"] for h in d["hits"]), default=0.0) for d in docs], dtype=float)
    dense = np.array([max(((h["dense_score"] or 0.0) for h in d["hits"]), default=0.0) for d in docs], dtype=float)
    sparse = np.array([max(((h["sparse_score"] or 0.0) for h in d["hits"]), default=0.0) for d in docs], dtype=float)
    rows = []
    for g, d in enumerate(docs):
        s_rank = min(((h["sparse_rank"] or 101) for h in d["hits"]), default=101)
        rows.append([math.log1p(g), float(g == 0), math.log1p(d["first_hit"]), len(d["hits"]),
                     _rel(fused[g:g + 1], fused.max())[0], dense[g] - dense.max(), dense[g],
                     _rel(sparse[g:g + 1], sparse.max())[0], math.log1p(s_rank), _cover(q_tok, title_tok[g]),
                     _cover(q_tok, d["all_tokens"]), _rel(best_bm25[g:g + 1], best_bm25.max())[0],
                     math.log1p(len(d["sentences"]))])
    return np.asarray(rows, dtype=np.float32).reshape(len(docs), len(DOC_FEATURES))


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
    n = len(sents)
    rows = []
    for sp in spans:
        i, j, t = sp.first, sp.last, text[sp.start:sp.end]
        pre, post = text[sents[i][0]:sp.start], text[sp.end:sents[j][1]]
        rows.append([i, j, sp.start, sp.end, i / max(n - 1, 1), float(i == 0), math.log1p(i), len(t), math.log1p(len(t)),
                     float(sp.kind == "sentence"), float(sp.kind == "window" and j - i == 1),
                     float(sp.kind == "window" and j - i >= 2), float(sp.kind == "clause"),
                     float(text[max(sp.start - 1, 0):sp.start] in ("：", ":") or (i > 0 and text[sents[i - 1][1] - 1] in "：:")),
                     float(bool(_DIGIT.search(t))), float(bool(_DATE.search(t))), float(bool(_PLACE.search(t))),
                     float(bool(_ENUM.match(t))), float(bool(title) and title[:12] in t), float(sp.kind == "run"),
                     float(not pre.strip()), float(not post.strip(" 。！？；;!?\u3000\n")),
                     math.log1p(len(_CLAUSE_MARK.findall(t))), float(sp.kind == "entity"), float(sp.kind == "gap"),
                     len(set(t))])
    return np.asarray(rows, dtype=np.float64).reshape(len(spans), len(STATIC))


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


def _sentence_arrays(d: dict, best_all: float, qt: list[str]) -> dict:
    """Per-sentence arrays of one document for :func:`span_matrix`: BM25 relative to the document's best and
    to the best of all, rank within the document, cosine minus the document's best (NaN where not computed)
    and its rank, and which question tokens each sentence holds."""
    n = len(d["sentences"])
    bm = np.asarray(d["bm"], dtype=np.float32)
    best = float(bm.max()) if n else 0.0
    dense = np.asarray(d["dense"], dtype=np.float64)
    have = ~np.isnan(dense)
    drank = np.full(n, n, dtype=int)
    drank[have] = _ranks(dense[have])
    return {"rel": (bm / best) if best > 0 else np.zeros(n, dtype=np.float32),
            "rel_all": (bm / best_all) if best_all > 0 else np.zeros(n, dtype=np.float32), "rank": _ranks(bm),
            "dense": dense - (float(dense[have].max()) if have.any() else 0.0), "drank": drank,
            "tok": np.array([[t in st for t in qt] for st in d["sent_tokens"]], dtype=np.int32).reshape(n, len(qt)),
            "sa": np.array([a for a, _ in d["sentences"]], dtype=int).reshape(n),
            "se": np.array([e for _, e in d["sentences"]], dtype=int).reshape(n)}


def span_matrix(question: str, docs: list[dict], statics: list[np.ndarray], best_all: float, q_tok: set[str],
                q_chars: set[str], n_hits_total: int) -> np.ndarray:
    """(n_spans, |SPAN_FEATURES|) float32 for the spans of ``docs`` in order, each document's question-free
    part in ``statics`` (rows of :func:`static_span_features`); a document holds ``text``, ``codes`` (its code
    points), ``norm`` and ``norm_at`` (its :func:`answers.echo.normalized` form), ``sentences``, ``sent_tokens``
    (token sets), ``hits`` and the question's ``bm`` (BM25) and ``dense`` (cosine, NaN where not computed) per
    sentence. Vectorised over the spans of all documents at
    once: sentence indices and text offsets are shifted onto the documents laid end to end, so nothing reads
    across a document's edge (a span's "sentence before" exists only inside its document)."""
    qt, qc = sorted(q_tok), sorted(q_chars)
    per = [_sentence_arrays(d, best_all, qt) for d in docs]
    n_sent = np.array([len(d["sentences"]) for d in docs], dtype=int)
    sb = np.concatenate([[0], np.cumsum(n_sent)])
    tb = np.concatenate([[0], np.cumsum([len(d["codes"]) for d in docs])])
    static = np.vstack(statics) if statics else np.zeros((0, len(STATIC)))
    doc_of = np.repeat(np.arange(len(docs)), [len(x) for x in statics])
    S = {k: static[:, c] for c, k in enumerate(STATIC)}
    N = int(sb[-1])
    cat = {k: np.concatenate([p[k] for p in per]) if per else np.zeros((0, len(qt)) if k == "tok" else 0)
           for k in ("rel", "rel_all", "rank", "dense", "drank", "tok", "sa", "se")}
    sa, se = cat["sa"] + np.repeat(tb[:-1], n_sent), cat["se"] + np.repeat(tb[:-1], n_sent)
    li, lj = S["first"].astype(int), S["last"].astype(int)
    i, j = li + sb[doc_of], lj + sb[doc_of]
    start, end = S["start"].astype(int) + tb[doc_of], S["end"].astype(int) + tb[doc_of]
    first = li == 0
    rel = cat["rel"]
    relx = np.append(rel, np.float32(0.0))  # index N reads 0: no sentence before / after in the document
    prev = np.where(first, N, i - 1)
    nxt = np.where(lj + 1 < n_sent[doc_of], j + 1, N)
    bm_max = np.maximum.reduce([rel[i], rel[np.minimum(i + 1, j)], rel[j]])
    dense, m = cat["dense"], len(i)
    dense_first = np.where(np.isnan(dense[i]), -1.0, dense[i])
    dprev = dense[np.where(first, i, i - 1)]
    dense_prev = np.where(first | np.isnan(dprev), -1.0, dprev)
    # question tokens per sentence, OR-ed over each span's sentences (and the one before)
    ctok = np.vstack([np.zeros((1, len(qt)), dtype=np.int32), np.cumsum(cat["tok"], axis=0)])
    nq_tok = len(qt) or 1
    cover = ((ctok[j + 1] - ctok[i]) > 0).sum(1) / nq_tok if qt else np.zeros(m)
    cover_ctx = ((ctok[j + 1] - ctok[np.where(first, i, i - 1)]) > 0).sum(1) / nq_tok if qt else np.zeros(m)
    # question chars in the span, the sentence before, and the parts of its sentences left out of it
    nq = len(qc) or 1
    codes = np.concatenate([d["codes"] for d in docs]) if docs else np.zeros(0, dtype=np.uint32)
    pa, pb = np.where(first, 0, sa[i - 1]), np.where(first, 0, se[i - 1])
    pres = _presence(codes, qc, np.concatenate([start, pa, sa[i], end]), np.concatenate([end, pb, start, se[j]]))
    in_span, in_prev, in_pre, in_post = pres[:, :m], pres[:, m:2 * m], pres[:, 2 * m:3 * m], pres[:, 3 * m:]
    got = in_span.sum(0)
    char_cover = got / len(qc) if qc else np.zeros(m)
    char_ctx = (in_span | in_prev).sum(0) / len(qc) if qc else np.zeros(m)
    distinct = S["distinct_chars"]
    new_share = np.where(distinct > 0, (distinct - got) / np.maximum(distinct, 1), 0.0)
    rank_c = np.full(m, np.iinfo(np.int64).max, dtype=np.int64)
    for g, d in enumerate(docs):
        for h in d["hits"]:
            inside = (start >= h["start"] + tb[g]) & (start < h["end"] + tb[g])
            rank_c = np.where(inside, np.minimum(rank_c, h["rank"]), rank_c)
    in_chunk = rank_c != np.iinfo(np.int64).max
    rank = cat["rank"]
    num_q, date_q, place_q, how_q = _cues(question)
    cols = [rel[i], bm_max, relx[prev], relx[nxt], np.log1p(rank[i]), cat["rel_all"][i], rank[i] == 0, cover,
            cover_ctx, char_cover, char_ctx, dense_first, dense_prev, np.log1p(cat["drank"][i]), S["pos_rel"],
            S["pos_first"], S["pos_log"], S["len_log"], S["kind_sentence"], S["kind_window2"], S["kind_window3"],
            S["kind_clause"], in_chunk, np.log1p(np.where(in_chunk, rank_c, n_hits_total + 1)), S["after_colon"],
            num_q * S["digit"], date_q * S["date"], place_q * S["place"], float(how_q) * S["len_log"],
            S["enum_start"], S["title_in_span"], S["kind_run"], in_pre.sum(0) / nq, in_post.sum(0) / nq, new_share,
            S["starts_sentence"], S["ends_sentence"], S["clauses_log"],
            np.log((S["len"] + 1) / (len(question) + 1)), S["kind_entity"], S["kind_gap"]]
    out = np.empty((m, len(cols) + len(ECHO_FEATURES)), dtype=np.float32)
    for c, col in enumerate(cols):
        out[:, c] = col
    eq = EchoQuery.of(question)
    for g, d in enumerate(docs):
        rows = doc_of == g
        out[rows, len(cols):] = echo_matrix(eq, d["norm"], d["norm_at"], S["start"][rows].astype(np.int64),
                                            S["end"][rows].astype(np.int64))
    return out


def question_chars(question: str) -> set[str]:
    """The question's content characters (function words, question words and punctuation left out)."""
    return {c for c in question if c not in _STOP_CHARS and not c.isspace()}
