"""Retrieval evaluation on real questions (SPEC §7): LeCoQA legal-consultation questions against a pool of
statute articles (``../shared/qa/``, see its README).

Each article is one document and one chunk (articles are short: the encoders embed longer ones in
windows, :mod:`retrieval.embed`); its indexed text is ``law_title + " " + article text`` (the law's name is
what a reader sees above an article; ``pool_text="article"`` indexes the article alone). A hit@k is any
gold article among the top-k results; reported per system: recall@1/5/10 and MRR@10 (README of the data).

Systems: BM25 (bm25s over the segmenter's tokens, :mod:`retrieval.sparse`), each dense encoder given
(fine-tuned, untrained = same architecture randomly initialised, retrieval-trained), and per dense encoder
the hybrid of :mod:`retrieval.fusion` whose weights are fitted on queries mined from the pool itself
(lead clause of each article, its ``第N条`` number removed; never the questions), ranked against a copy of
the pool with each lead cut out of its article (ICT, see :mod:`retrieval.mining`). The same systems are also
scored on those mined queries (query set ``mined``, on the masked pool), so the table shows hybrid vs its
parts on both sets.
Passage embeddings are cached on disk under ``cache_dir`` keyed by the encoder's model id and the texts.

With tuning questions, each dense system is also scored with its query side tuned on them
(:mod:`retrieval.query_tuning`) and its fusion weight fitted on their dev share, cross-fitted when they are the
evaluated questions themselves (:func:`tuned_rows`): a reported figure never comes from a model or a weight fitted
on its own question.
"""
from __future__ import annotations

import hashlib
import json
import os
import re
import time
from dataclasses import asdict, dataclass, field
from pathlib import Path
from typing import Callable

import numpy as np
import pandas as pd

from retrieval.dense import build_index, search_rows
from retrieval.encoders import Encoder
from retrieval.fusion import FusionConfig, fit_fusion, fuse_with
from retrieval.metrics import doc_metrics
from retrieval.mining import mask_leads, mine_queries
from retrieval.pinning import model_id
from retrieval.query_tuning import TUNING_FILE, QueryTuneConfig, tune_queries, tuning_folds
from retrieval.sparse import SparseConfig, SparseIndex, make_tokenizer
from storage.bounds import check_bounds

_ARTICLE_NO = re.compile(r"^第[零一二三四五六七八九十百千万〇\d]+条(之[一二三四五六七八九十]+)?\s*")


@dataclass(frozen=True)
class QAEvalConfig:
    """pool_text: ``title+article`` (law title, then the article) or ``article``; depth: candidates per side
    for the hybrid; max_questions: evaluate only the first n questions (None: all); fusion/sparse: the
    hybrid and BM25 settings used by the index build; tuning: query-side fine-tuning of each dense system on
    the tuning questions (:mod:`retrieval.query_tuning`; used when :func:`evaluate_qa` gets them),
    tune_folds / tune_dev_share: its cross-fitting (:func:`retrieval.query_tuning.tuning_folds`), tune_group:
    ``query`` (questions grouped by their text) or ``gold`` (by their gold documents: no document's questions
    on both sides of a split).

    Raises:
        ValueError: unknown ``tune_group``; ``tune_folds`` < 2; ``tune_dev_share`` outside (0, 0.99].
    """

    pool_text: str = "title+article"
    max_questions: int | None = None
    fusion: FusionConfig = field(default_factory=FusionConfig)
    sparse: SparseConfig = field(default_factory=SparseConfig)
    tuning: QueryTuneConfig = field(default_factory=QueryTuneConfig)
    tune_folds: int = 5
    tune_dev_share: float = 0.15
    tune_group: str = "query"

    def __post_init__(self):
        if self.tune_group not in ("query", "gold"):
            raise ValueError(f"unknown tune_group {self.tune_group!r} (query, gold)")
        check_bounds(self, tune_folds=(2, 1000), tune_dev_share=(">", 0, 0.99))


def load_pool(path: str | os.PathLike, pool_text: str = "title+article") -> pd.DataFrame:
    """The retrieval pool, one row per indexed chunk: doc_id, text (indexed text), body (text for mined
    queries), title.

    Two formats, told apart by their columns: statute articles (``article_id, law_title, article, text``: one
    row per article, text ``law_title + " " + text`` or the article alone, body without its ``第N条``) and
    documents (``doc_id, text``, optional ``title``: each document cut into the chunks of
    :func:`retrieval.chunks.chunk_text`, SPEC §7, as the index stores it, each chunk indexed after its document's
    title (:func:`_titled`); a document is ranked by its best chunk).

    Raises:
        ValueError: unknown ``pool_text``, or a pool in neither format.
    """
    if pool_text not in ("title+article", "article"):
        raise ValueError(f"unknown pool_text {pool_text!r} (title+article, article)")
    df = pd.read_json(path, lines=True, dtype={"doc_id": str, "article_id": str})
    if {"doc_id", "text"} <= set(df.columns) and "article_id" not in df.columns:
        return _document_pool(df)
    if not {"article_id", "law_title", "text"} <= set(df.columns):
        raise ValueError(f"{path}: a pool needs columns article_id, law_title, text (statutes) or doc_id, text")
    text = df["law_title"] + " " + df["text"] if pool_text == "title+article" else df["text"]
    return pd.DataFrame({"doc_id": df["article_id"].astype(str), "text": text, "title": df["law_title"],
                         "article": df.get("article", ""), "body": [_ARTICLE_NO.sub("", t) for t in df["text"]]})


def _document_pool(df: pd.DataFrame) -> pd.DataFrame:
    """Chunk rows (doc_id, text, title, body) of a documents pool (:func:`load_pool`)."""
    from retrieval.chunks import ChunkConfig, chunk_text

    titles = df["title"] if "title" in df.columns else pd.Series([""] * len(df))
    rows = [(str(d), _titled(t[a:b], str(ti or "")), str(ti or ""))
            for d, t, ti in zip(df["doc_id"], df["text"], titles) for a, b in chunk_text(t, ChunkConfig())]
    pool = pd.DataFrame(rows, columns=["doc_id", "text", "title"])
    return pool.assign(body=pool["text"])


def _titled(chunk: str, title: str) -> str:
    """A chunk as indexed: its document's title on a line before it (DPR's title + passage, Karpukhin et al.
    2020), unless the chunk already starts with it (a document's first chunk usually does)."""
    return chunk if not title or chunk.startswith(title) else f"{title}\n{chunk}"


def mined_pool_queries(pool: pd.DataFrame, cfg: FusionConfig) -> pd.DataFrame:
    """Self-supervised fit queries of the pool: the lead clause of each article body (no titles: a law title
    is shared by all its articles). Columns query, doc_id, kind, gold."""
    q = mine_queries(pd.DataFrame({"doc_id": pool["doc_id"], "text": pool["body"]}), cfg)
    return q.assign(gold=[[d] for d in q["doc_id"]])


def cached_embeddings(encode: Callable[[list[str]], np.ndarray], texts: list[str], key: str,
                      cache_dir: str | os.PathLike | None) -> np.ndarray:
    """``encode(texts)`` cached as ``cache_dir/<sha256(key, texts)[:20]>.npy`` (key: the encoder's model id)."""
    if cache_dir is None:
        return encode(texts)
    h = hashlib.sha256(key.encode())
    for t in texts:
        h.update(t.encode("utf-8") + b"\x1f")
    path = Path(cache_dir) / f"{h.hexdigest()[:20]}.npy"
    if path.is_file():
        return np.load(path)
    vecs = encode(texts)
    path.parent.mkdir(parents=True, exist_ok=True)
    tmp = path.with_suffix(".tmp.npy")
    np.save(tmp, vecs)
    os.replace(tmp, path)
    return vecs


Ranked = tuple  # (rows, scores): per query, pool rows best first and their scores


def _dense_rows(vecs: np.ndarray, qvecs: np.ndarray, depth: int) -> Ranked:
    """(rows, scores) of the top ``depth`` pool vectors per query vector (exact search)."""
    return search_rows(build_index(vecs, np.arange(len(vecs), dtype=np.int64)), qvecs, depth)


def _fit(dense: Ranked, sparse: Ranked, doc_ids: list[str], gold: list, cfg: FusionConfig) -> dict:
    """:func:`retrieval.fusion.fit_fusion` of two rankings of the same queries."""
    return fit_fusion(dense[0], sparse[0], doc_ids, gold, cfg, dense[1], sparse[1])


def _fused(dense: Ranked, sparse: Ranked, w_dense: float, cfg: FusionConfig) -> list[list[int]]:
    """Fused rows per query (:func:`retrieval.fusion.fuse_with`, ``cfg.method``)."""
    return [[r for r, *_ in fuse_with(cfg.method, d, ds, s, ss, w_dense, cfg.rrf_k)]
            for d, ds, s, ss in zip(dense[0], dense[1], sparse[0], sparse[1])]


def _docs(rows: list[list[int]], doc_ids: list[str], k: int = 10) -> list[list[str]]:
    """The first ``k`` distinct documents of ranked pool rows (a pool may hold several chunks of a document)."""
    return [list(dict.fromkeys(doc_ids[r] for r in rr))[:k] for rr in rows]


@dataclass
class DenseSystem:
    """A named dense encoder for the evaluation: ``passages(texts)``, ``queries(texts)`` -> (n, dim) and the
    cache key of its passage vectors (its model id)."""

    name: str
    passages: Callable[[list[str]], np.ndarray]
    queries: Callable[[list[str]], np.ndarray]
    key: str
    ckpt: str | None = None


def dense_system(name: str, ckpt_dir: str | os.PathLike, untrained: bool = False, seed: int = 13,
                 batch_size: int = 64) -> DenseSystem:
    """A :class:`DenseSystem` from a checkpoint dir (``untrained``: same architecture, random init)."""
    enc = Encoder.untrained_like(ckpt_dir, seed) if untrained else Encoder.from_checkpoint(ckpt_dir, batch_size)
    enc.batch_size = batch_size
    mid = model_id(ckpt_dir) + (f"-untrained{seed}" if untrained else "")
    return DenseSystem(name, enc.encode_corpus, enc.encode_queries, mid, None if untrained else str(ckpt_dir))


def evaluate_qa(questions: pd.DataFrame, pool: pd.DataFrame, systems: list[DenseSystem],
                cfg: QAEvalConfig = QAEvalConfig(), cache_dir: str | os.PathLike | None = None,
                tokenizer=None, log: Callable[[str], None] = print,
                tune_questions: pd.DataFrame | None = None) -> tuple[pd.DataFrame, dict]:
    """Score BM25, every dense system and its hybrid on the questions and on the mined pool queries; with
    ``tune_questions``, also each system with its query side tuned on them (:func:`tuned_rows`).

    Args:
        questions: query, gold (list of doc ids). pool: doc_id, text, body (see :func:`load_pool`).
        systems: dense encoders. tokenizer: ``make_tokenizer`` result (else loaded from ``cfg.sparse``).
        tune_questions: query, gold: questions to tune the query side on (the evaluated ones themselves are
            cross-fitted, never scored by a model that trained on them).

    Returns:
        (table with columns query_set, system, recall@1, recall@5, recall@10, mrr@10, queries, w_dense,
        info dict with timings, the fitted fusions and the segmenter).
    """
    tokenize, ident = tokenizer or make_tokenizer(cfg.sparse.segmenter)
    doc_ids = pool["doc_id"].tolist()
    mined = mined_pool_queries(pool, cfg.fusion)
    sets = {"questions": questions, "mined": mined}
    info: dict = {"segmenter": ident, "pool": len(pool), "mined_queries": len(mined), "seconds": {}}
    texts = pool["text"].tolist()
    sparse_rows, masked, sp = _sparse_rankings(texts, doc_ids, sets, tokenize, cfg, info)
    depth = cfg.fusion.depth
    rows = [{"query_set": n, "system": "bm25", **doc_metrics(_docs(sparse_rows[n][0], doc_ids), q["gold"].tolist())}
            for n, q in sets.items()]
    for s in systems:
        t = time.perf_counter()
        vecs = cached_embeddings(s.passages, texts, s.key, cache_dir)
        info["seconds"][f"embed_pool:{s.name}"] = time.perf_counter() - t
        fit_vecs = vecs.copy()
        if masked:
            fit_vecs[list(masked)] = cached_embeddings(s.passages, list(masked.values()), s.key, cache_dir)
        dense_rows = {n: _dense_rows(fit_vecs if n == "mined" else vecs, s.queries(q["query"].tolist()), depth)
                      for n, q in sets.items()}
        fit = _fit(dense_rows["mined"], sparse_rows["mined"], doc_ids, mined["gold"].tolist(), cfg.fusion)
        info[f"fusion:{s.name}"] = {k: fit[k] for k in ("w_dense", "curve")}
        log(f"{s.name}: pool embedded in {info['seconds'][f'embed_pool:{s.name}']:.1f} s, "
            f"fitted w_dense {fit['w_dense']:.2f}")
        for n, q in sets.items():
            gold = q["gold"].tolist()
            fused = _fused(dense_rows[n], sparse_rows[n], fit["w_dense"], cfg.fusion)
            rows.append({"query_set": n, "system": f"dense:{s.name}",
                         **doc_metrics(_docs(dense_rows[n][0], doc_ids), gold)})
            rows.append({"query_set": n, "system": f"hybrid:{s.name}", "w_dense": fit["w_dense"],
                         **doc_metrics(_docs(fused, doc_ids), gold)})
        if tune_questions is not None and s.ckpt is not None:
            ranked = lambda q: _sparse_top(sp, tokenize(list(q)), depth)  # noqa: E731
            t = time.perf_counter()
            rows += tuned_rows(s, vecs, doc_ids, questions, tune_questions, ranked, sparse_rows["questions"], cfg,
                               cache_dir, info, log)
            info["seconds"][f"query_tuning:{s.name}"] = time.perf_counter() - t
    table = pd.DataFrame(rows).sort_values(["query_set", "system"], kind="stable").reset_index(drop=True)
    return table, info


def _group_keys(q: pd.DataFrame, group: str) -> list[str]:
    """Per question, the key that keeps related questions on one side of a split (:class:`QAEvalConfig`)."""
    if group == "gold":
        return ["\x1f".join(sorted(map(str, g))) for g in q["gold"]]
    return [str(x).strip() for x in q["query"]]


def _tuned_dir(cache_dir: str | os.PathLike | None, key: str, train_q: pd.DataFrame, dev_q: pd.DataFrame,
               tcfg: QueryTuneConfig) -> Path:
    """Where a tuned query encoder is kept: keyed by the passage encoder, the questions and the config."""
    h = hashlib.sha256(json.dumps([key, asdict(tcfg), train_q["query"].tolist(), dev_q["query"].tolist(),
                                   [sorted(map(str, g)) for g in train_q["gold"]]], ensure_ascii=False).encode())
    root = Path(cache_dir) if cache_dir is not None else Path(os.environ.get("TMPDIR", "/tmp")) / "qa_eval"
    return root / f"query-tuned-{h.hexdigest()[:16]}"


def tuned_rows(s: DenseSystem, vecs: np.ndarray, doc_ids: list[str], questions: pd.DataFrame,
               tune_q: pd.DataFrame, sparse_top: Callable, sparse_rows: Ranked, cfg: QAEvalConfig,
               cache_dir, info: dict, log: Callable[[str], None]) -> list[dict]:
    """Rows ``dense:tuned-<name>`` and ``hybrid:tuned-<name>`` on the questions: per fold of
    :func:`retrieval.query_tuning.tuning_folds`, the query side of ``s`` tuned on the fold's training questions
    against the pool vectors ``vecs`` (reused from ``cache_dir`` when the same run was made), the fusion weight
    fitted on the fold's dev questions, the fold's reported questions ranked by both. With ``cfg.tuning.steps``
    0 nothing is tuned (rows ``…:qfit-<name>``): only the fusion weight is fitted on dev questions.

    Args:
        sparse_top: ``queries -> BM25 (rows, scores)``; sparse_rows: BM25 (rows, scores) of ``questions``.
    """
    plan = tuning_folds(_group_keys(questions, cfg.tune_group), _group_keys(tune_q, cfg.tune_group),
                        cfg.tune_folds, cfg.tune_dev_share, cfg.tuning.seed)
    depth, n = cfg.fusion.depth, len(questions)
    dense: list = [[] for _ in range(n)]
    fused: list = [[] for _ in range(n)]
    folds = []
    for k, fold in enumerate(plan):
        tr, dv = tune_q.iloc[fold.train].reset_index(drop=True), tune_q.iloc[fold.dev].reset_index(drop=True)
        meta, q_of = {}, s.queries
        if cfg.tuning.steps:
            out = _tuned_dir(cache_dir, s.key, tr, dv, cfg.tuning)
            if not (out / TUNING_FILE).is_file():
                log(f"{s.name}: tuning the query side, fold {k + 1}/{len(plan)} ({len(tr)} train, {len(dv)} dev)")
                tune_queries(s.ckpt, vecs, doc_ids, tr, dv, out, cfg.tuning, s.key, log=lambda m: None)
            meta = json.loads((out / TUNING_FILE).read_text(encoding="utf-8"))
            q_of = Encoder.from_checkpoint(out).encode_queries
        fit = _fit(_dense_rows(vecs, q_of(dv["query"].tolist()), depth), sparse_top(dv["query"]), doc_ids,
                   dv["gold"].tolist(), cfg.fusion)
        test = questions.iloc[fold.test]
        if len(test):
            d = _dense_rows(vecs, q_of(test["query"].tolist()), depth)
            sr = ([sparse_rows[0][i] for i in fold.test], [sparse_rows[1][i] for i in fold.test])
            for i, drow, frow in zip(fold.test, d[0], _fused(d, sr, fit["w_dense"], cfg.fusion)):
                dense[i], fused[i] = drow, frow
        folds.append({"train": len(tr), "dev": len(dv), "test": len(fold.test), "w_dense": fit["w_dense"],
                      "best_step": (meta.get("best") or {}).get("step"), "seconds": meta.get("seconds")})
    info[f"query_tuning:{s.name}"] = {"folds": folds, "config": asdict(cfg.tuning), "group": cfg.tune_group}
    gold = questions["gold"].tolist()
    w = float(np.mean([f["w_dense"] for f in folds]))
    tag = "tuned" if cfg.tuning.steps else "qfit"  # qfit: no tuning, the fusion fitted on dev questions
    return [{"query_set": "questions", "system": f"dense:{tag}-{s.name}", **doc_metrics(_docs(dense, doc_ids), gold)},
            {"query_set": "questions", "system": f"hybrid:{tag}-{s.name}", "w_dense": w,
             **doc_metrics(_docs(fused, doc_ids), gold)}]


def _sparse_rankings(texts: list[str], doc_ids: list[str], sets: dict, tokenize, cfg: QAEvalConfig, info: dict
                     ) -> tuple[dict[str, Ranked], dict[int, str], SparseIndex]:
    """BM25 rankings (top ``depth`` pool rows) of every query set, the ``mined`` set against the pool with each
    lead cut out of its article (ICT); returns them with the masked articles ``{row: text}`` and the index."""
    t = time.perf_counter()
    tokens = tokenize(texts)
    sp = SparseIndex.build(tokens, cfg.sparse)
    masked = mask_leads(texts, doc_ids, sets["mined"]) if cfg.fusion.mask_leads else {}
    fit_tokens = list(tokens)
    for r, tk in zip(masked, tokenize(list(masked.values()))):
        fit_tokens[r] = tk
    fit_sp = SparseIndex.build(fit_tokens, cfg.sparse) if masked else sp
    info["seconds"]["bm25_index"] = time.perf_counter() - t
    info["masked_articles"] = len(masked)
    return {n: _sparse_top(fit_sp if n == "mined" else sp, tokenize(q["query"].tolist()), cfg.fusion.depth)
            for n, q in sets.items()}, masked, sp


def _sparse_top(sp: SparseIndex, tokens: list, depth: int) -> Ranked:
    """BM25 (rows, scores) of tokenized queries."""
    tops = [sp.top(tk, depth) for tk in tokens]
    return [r.tolist() for r, _ in tops], [sc.tolist() for _, sc in tops]


def write_results(table: pd.DataFrame, info: dict, cfg: QAEvalConfig, out_dir: str | os.PathLike) -> Path:
    """``qa_eval.parquet`` and ``qa_eval.json`` (config, info) in ``out_dir``; returns the Parquet path."""
    out = Path(out_dir)
    out.mkdir(parents=True, exist_ok=True)
    table.to_parquet(out / "qa_eval.parquet", index=False)
    (out / "qa_eval.json").write_text(json.dumps({"config": asdict(cfg), "info": info}, ensure_ascii=False,
                                                 indent=1, default=str), encoding="utf-8")
    return out / "qa_eval.parquet"


def format_table(table: pd.DataFrame) -> str:
    """The table as aligned text (one row per query set and system)."""
    cols = ["query_set", "system", "recall@1", "recall@5", "recall@10", "mrr@10", "queries"]
    t = table.reindex(columns=cols + (["w_dense"] if "w_dense" in table else []))
    return t.to_string(index=False, float_format=lambda x: f"{x:.3f}")
