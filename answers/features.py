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
relative to the question's. All scores enter as ranks or ratios within the question, so the weights do not
depend on the scale of one encoder or one corpus.
"""
from __future__ import annotations

import math
import re
from dataclasses import dataclass, field

import numpy as np

from answers.candidates import Span

DOC_FEATURES = ("doc_rank_log", "doc_top", "first_hit_log", "n_hits", "fused_rel", "dense_rel", "dense_raw",
                "sparse_rel", "sparse_rank_log", "title_cover", "doc_cover", "best_bm25_rel", "n_sent_log")
SPAN_FEATURES = ("bm25_first", "bm25_max", "bm25_prev", "bm25_next", "bm25_rank_log", "bm25_all_rel", "top_in_doc",
                 "cover", "cover_ctx", "char_cover", "char_cover_ctx", "dense_first", "dense_prev", "dense_rank_log",
                 "pos_rel", "pos_first", "pos_log", "len_log", "kind_sentence", "kind_window2", "kind_window3",
                 "kind_clause", "in_chunk", "chunk_rank_log", "after_colon", "num_cue", "date_cue", "place_cue",
                 "how_len", "enum_start", "title_in_span", "kind_run", "pre_char_cover", "post_char_cover",
                 "new_char_share", "starts_sentence", "ends_sentence", "clauses_log", "len_vs_question",
                 "kind_entity", "kind_gap")

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


def sentence_bm25(q_tokens: list[str], sent_tokens: list[list[str]]) -> np.ndarray:
    """BM25 (Lucene variant, k1 1.5, b 0.75) of the question against each sentence, IDF over these
    sentences; (n_sentences,) float32, zeros when nothing matches."""
    import bm25s

    if not sent_tokens:
        return np.zeros(0, dtype=np.float32)
    corpus = [t if t else [""] for t in sent_tokens]
    bm = bm25s.BM25(k1=1.5, b=0.75, method="lucene")
    bm.index(corpus, show_progress=False)
    ids = [i for i in bm.get_tokens_ids(list(q_tokens)) if i != bm.vocab_dict.get("")]
    if not ids:
        return np.zeros(len(corpus), dtype=np.float32)
    return np.asarray(bm.get_scores_from_ids(ids), dtype=np.float32)


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


def span_rows(question: str, d: dict, bm: np.ndarray, dense: np.ndarray, best_all: float,
              q_tok: set[str], q_chars: set[str], n_hits_total: int) -> list[list[float]]:
    """Feature rows (|SPAN_FEATURES| each) of every span of document ``d``; ``bm``/``dense``: the question's
    BM25 and cosine per sentence of ``d`` (dense NaN where not computed)."""
    text, sents, toks = d["text"], d["sentences"], d["sent_tokens"]
    n = len(sents)
    best = float(bm.max()) if n else 0.0
    order = np.argsort(-bm, kind="stable")
    rank = np.empty(n, dtype=int)
    rank[order] = np.arange(n)
    have = ~np.isnan(dense)
    dmax = float(dense[have].max()) if have.any() else 0.0
    drank = np.full(n, n, dtype=int)
    if have.any():
        idx = np.flatnonzero(have)
        drank[idx[np.argsort(-dense[idx], kind="stable")]] = np.arange(len(idx))
    num_q, date_q, place_q, how_q = _cues(question)
    title = d["meta"].get("title") or ""
    rel = (bm / best).tolist() if best > 0 else [0.0] * n
    bm_all = (bm / best_all).tolist() if best_all > 0 else [0.0] * n
    sent_chars = [set(text[a:b]) for a, b in sents]
    unions: dict[tuple[int, int], set] = {}
    rows = []
    for sp in d["spans"]:
        i, j = sp.first, sp.last
        span_text = text[sp.start:sp.end]
        st = toks[i] if i == j else unions.setdefault((i, j), set().union(*toks[i:j + 1]))
        prev = toks[i - 1] if i > 0 else set()
        chars = set(span_text)
        prev_chars = sent_chars[i - 1] if i > 0 else set()
        rank_c = d["chunk_rank_at"](sp.start)
        rows.append([
            rel[i], max(rel[i:j + 1]), rel[i - 1] if i > 0 else 0.0,
            rel[j + 1] if j + 1 < n else 0.0, math.log1p(rank[i]),
            bm_all[i], float(rank[i] == 0),
            _cover(q_tok, st), _cover(q_tok, st | prev),
            len(q_chars & chars) / len(q_chars) if q_chars else 0.0,
            len(q_chars & (chars | prev_chars)) / len(q_chars) if q_chars else 0.0,
            (dense[i] - dmax) if have[i] else -1.0, (dense[i - 1] - dmax) if i > 0 and have[i - 1] else -1.0,
            math.log1p(drank[i]),
            i / max(n - 1, 1), float(i == 0), math.log1p(i), math.log1p(len(span_text)),
            float(sp.kind == "sentence"), float(sp.kind == "window" and j - i == 1),
            float(sp.kind == "window" and j - i >= 2), float(sp.kind == "clause"),
            float(rank_c is not None), math.log1p(rank_c if rank_c is not None else n_hits_total + 1),
            float(text[max(sp.start - 1, 0):sp.start] in ("：", ":") or (i > 0 and text[sents[i - 1][1] - 1] in "：:")),
            float(num_q and bool(_DIGIT.search(span_text))), float(date_q and bool(_DATE.search(span_text))),
            float(place_q and bool(_PLACE.search(span_text))), float(how_q) * math.log1p(len(span_text)),
            float(bool(_ENUM.match(span_text))), float(bool(title) and title[:12] in span_text),
            *_extent(text, sp, sents, span_text, chars, q_chars, len(question)),
        ])
    return rows


def _extent(text: str, sp: Span, sents: list[tuple[int, int]], span_text: str, chars: set[str],
            q_chars: set[str], q_len: int) -> list[float]:
    """The extent and kind features (the last 10 of SPAN_FEATURES) of one span."""
    pre, post = text[sents[sp.first][0]:sp.start], text[sp.end:sents[sp.last][1]]
    nq = len(q_chars) or 1
    return [float(sp.kind == "run"), len(q_chars & set(pre)) / nq, len(q_chars & set(post)) / nq,
            len(chars - q_chars) / len(chars) if chars else 0.0,
            float(not pre.strip()), float(not post.strip(" 。！？；;!?\u3000\n")),
            math.log1p(len(_CLAUSE_MARK.findall(span_text))), math.log((len(span_text) + 1) / (q_len + 1)),
            float(sp.kind == "entity"), float(sp.kind == "gap")]


def question_chars(question: str) -> set[str]:
    """The question's content characters (function words, question words and punctuation left out)."""
    return {c for c in question if c not in _STOP_CHARS and not c.isspace()}
