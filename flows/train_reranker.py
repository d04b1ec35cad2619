"""Train the cross-encoder reranker (:mod:`retrieval.cross_encoder`; SPEC §7, §9) on an index version's encoder,
no Prefect:

    python -m flows.train_reranker --data-dir DATA_NCPQA [--version v3] [--qa ../shared/qa]
        [--corpus ../shared/corpus/policy_docs.csv] [--layers 4 --max-len 192] [--init DIR]
        [--steps 120 --batch 4 --negatives 7 --max-seconds 600] [--threads 1] [--out DIR]
        [--sources ncpqa,ncpqa-sentence,lecoqa,mined] [--weights-file answer-reranker.safetensors]
        [--precision bf16] [--seed 13] [--device cuda --groups-per-forward 16]
        [--negatives-from hybrid --negatives-skip 20 --cache DIR] [--dev-share 0.2]

``--device cuda --batch 16 --groups-per-forward 16`` trains on a GPU (one forward a step; the part is saved from
the CPU; ``bench/gpu_reranker.py`` carries the groups and a packed body to a GPU machine that cannot reach the
data dir). ``--negatives-from hybrid`` takes the NCPQA and LeCoQA negatives from the hybrid search the
reranker will reorder (:func:`retrieval.rerank_data.hybrid_search_rows`) instead of BM25 alone;
``--negatives-skip N`` leaves out its first N hits (unlabelled positives; RocketQA's denoising). ``--dev-share``
keeps that share of the LeCoQA training questions out of training
(:func:`retrieval.rerank_data.lecoqa_dev_split`), for choosing such settings on them instead of on the test split.

``--init DATA/models/finetune-policysm1`` starts the body from the main job's PolicyBERT (its character/piece
stream: the first ``--layers`` layers; the word side is not read), the default from plain e5.

Training groups (:mod:`retrieval.rerank_data`): NCPQA questions of the answer evaluation's training documents
(``answers.ncpqa.split_by_document``, test share 0.3, seed 13: the same 129 held-out questions as
docs/answers.md), LeCoQA questions outside the held-out 20 % (:func:`retrieval.rerank_data.lecoqa_split`,
seed 13), title/lead pairs mined from the policy corpus and the training documents, and (``ncpqa-sentence``,
the answer stage's cross-encoder: :mod:`answers.rerank_features`) the same NCPQA questions → the sentence holding
the answer against their document's other sentences; ``--sources`` keeps some of them; a set touching a
held-out question or document is refused (:func:`retrieval.rerank_data.check_no_leak`). Writes the part
(``reranker.json`` + ``reranker.safetensors``) into ``--out`` (default ``DATA/models/reranker-ce``) with the
training record in its ``info``; install it into the next index version as its ``reranker`` part. With
``--sources ncpqa-sentence`` alone it is the answer stage's cross-encoder: ``answer-reranker.safetensors`` in
``DATA/models/answer-reranker-ce``, installed with ``--set answer_reranker=DIR/reranker.json``.
"""
from __future__ import annotations

import argparse
import sys
import time
from pathlib import Path

import pandas as pd

REPO = Path(__file__).resolve().parent.parent
QA = REPO.parent / "shared" / "qa"
CORPUS = REPO.parent / "shared" / "corpus" / "policy_docs.csv"


def ncpqa_questions(bundle, data_dir: str, qa: Path, seed: int = 13) -> pd.DataFrame:
    """NCPQA questions with gold located in the version's texts and the answer evaluation's split column."""
    from answers.documents import DocumentStore
    from answers.ncpqa import duplicate_targets
    from evaluation.sets import NcpqaLoader

    store = DocumentStore.from_frame(bundle.texts)
    return NcpqaLoader(qa / "ncpqa_questions.jsonl").load(store, duplicate_targets(data_dir), 0.3, seed).splits["all"]


def lecoqa_sets(qa: Path, tokenize, seed: int = 13):
    """(LeCoQA questions with a split column, the statute pool, ``search_rows(queries, k)`` over its BM25)."""
    from evaluation.sets import LecoqaLoader
    from retrieval.sparse import SparseIndex

    s = LecoqaLoader(qa / "lecoqa_train.jsonl", qa / "statutes.jsonl").load(0.2, seed)
    lq, pool = s.splits["all"], s.pool
    sp = SparseIndex.build(tokenize(pool["text"].tolist()))
    return lq, pool, sp, (lambda qs, k: [sp.top(t, k)[0].tolist() for t in tokenize(list(qs))])


def mined_docs(bundle, held_out_docs: set, corpus: Path) -> pd.DataFrame:
    """Documents to mine title/lead pairs from: the policy corpus and the version's documents that hold no
    held-out question."""
    real = pd.read_csv(corpus).rename(columns={"contentText": "text"}) if corpus.is_file() else pd.DataFrame()
    real = real.assign(doc_id=[f"corpus-{i}" for i in range(len(real))])[["doc_id", "title", "text"]] \
        if len(real) else pd.DataFrame(columns=["doc_id", "title", "text"])
    own = bundle.texts[~bundle.texts["doc_id"].isin(held_out_docs)][["doc_id", "title", "text"]]
    return pd.concat([real.dropna(subset=["text"]), own], ignore_index=True)


NEGATIVES_FROM = ("bm25", "hybrid")
HELD_OUT = "NCPQA split_by_document(0.3, seed 13) test; LeCoQA lecoqa_split(0.2, seed 13) test"


def prepare(data_dir: str, version: str | None = None, qa: Path = QA, corpus: Path = CORPUS, log=print,
            with_groups: bool = True, sources: tuple[str, ...] = (), negatives_from: str = "bm25",
            cache: str | None = None, negatives_skip: int = 0, dev_share: float = 0.0) -> dict:
    """Everything training and the bench read: ``bundle``, ``ncpqa`` / ``lecoqa`` question frames with their
    ``split``, ``pool`` (statutes), ``lecoqa_search`` (BM25 rows), ``held_out_docs`` and, ``with_groups``,
    ``train`` (groups frame, leak-checked; only the groups of ``sources`` when given: ``ncpqa``,
    ``ncpqa-sentence``, ``lecoqa``, ``mined``). ``negatives_from``: where the NCPQA and LeCoQA negatives come from,
    ``bm25`` or ``hybrid`` (the version's hybrid search for NCPQA chunks;
    :func:`retrieval.rerank_data.hybrid_search_rows` over the statute pool for LeCoQA, its vectors cached under
    ``cache``; ``negatives_skip`` leaves out the hybrid's first hits); mined groups keep BM25's. ``dev_share``
    (0 ≤ x < 1) moves that share of the LeCoQA training questions to a ``dev`` split
    (:func:`retrieval.rerank_data.lecoqa_dev_split`), kept out of training and of nothing else, for choosing
    settings without reading the test split.

    Raises:
        ValueError: a source or ``negatives_from`` that is not one of those (named), or a leak
            (:class:`retrieval.rerank_data.LeakError`).
    """
    from retrieval.bundle import load_bundle
    from answers.candidates import sentence_offsets
    from retrieval.rerank_data import (check_no_leak, hybrid_search_rows, lecoqa_dev_split, lecoqa_groups,
                                       located_questions, mined_groups, ncpqa_groups, ncpqa_sentence_groups)

    bundle = load_bundle(Path(data_dir) / "index", version)
    r = bundle.retriever
    nq = ncpqa_questions(bundle, data_dir, qa)
    held_docs = set(nq.loc[nq["split"] == "test", "doc_id"].dropna())
    lq, pool, sp, search_rows = lecoqa_sets(qa, r.tokenize)
    lq = lq.assign(split=lecoqa_dev_split(lq, dev_share)) if dev_share else lq
    out = {"bundle": bundle, "ncpqa": nq, "lecoqa": lq, "pool": pool, "lecoqa_search": search_rows,
           "lecoqa_sparse": sp, "held_out_docs": held_docs}
    if not with_groups:
        return out
    tr_n = located_questions(nq, "train")
    if negatives_from not in NEGATIVES_FROM:
        raise ValueError(f"negatives_from {negatives_from!r}: choose from {', '.join(NEGATIVES_FROM)}")
    hybrid = negatives_from == "hybrid"
    skip = negatives_skip if hybrid else 0
    g_n = ncpqa_groups(tr_n, r.chunks, lambda q, k: r.search(q, k + skip, mode="hybrid" if hybrid else "sparse")[skip:],
                       held_docs)
    g_l = lecoqa_groups(lq[lq["split"] == "train"], pool, hybrid_search_rows(
        pool["text"].tolist(), r.encoder, bundle.model_id, search_rows, cache, skip=skip) if hybrid else search_rows)
    g_m = mined_groups(mined_docs(bundle, held_docs, corpus), r.tokenize)
    g_s = ncpqa_sentence_groups(tr_n, dict(zip(bundle.texts["doc_id"], bundle.texts["text"])), r.tokenize,
                                sentence_offsets, held_docs)
    train = pd.concat([g_n, g_l, g_m, g_s], ignore_index=True)
    if sources:
        check_sources(sources)
        empty = sorted(set(sources) - set(train["source"]))
        if empty:
            raise ValueError(f"training source(s) {empty} gave no group on index {bundle.version}")
        train = train[train["source"].isin(sources)].reset_index(drop=True)
    held = pd.concat([nq.loc[nq["split"] == "test", ["qid", "question"]],
                      lq.loc[lq["split"] != "train", ["qid", "question"]]], ignore_index=True)
    check_no_leak(train, held, held_docs)
    log(f"training groups: ncpqa {len(g_n)}, ncpqa-sentence {len(g_s)}, lecoqa {len(g_l)}, mined {len(g_m)}"
        f" (kept: {train['source'].value_counts().to_dict()}); held out: ncpqa "
        f"{int((nq['split'] == 'test').sum())} questions ({len(held_docs)} documents), lecoqa "
        f"{int((lq['split'] == 'test').sum())} questions (dev {int((lq['split'] == 'dev').sum())})")
    return {**out, "train": train}


SOURCES = ("ncpqa", "ncpqa-sentence", "lecoqa", "mined")


def check_sources(sources) -> tuple[str, ...]:
    """``sources`` when it names one or more of :data:`SOURCES`.

    Raises:
        ValueError: an empty list or an unknown name (named)."""
    sources = tuple(sources)
    unknown = sorted(set(sources) - set(SOURCES))
    if not sources or unknown:
        raise ValueError(f"training sources {unknown or '(none)'}: choose from {', '.join(SOURCES)}")
    return sources


def balanced(train: pd.DataFrame, n: int, seed: int) -> pd.DataFrame:
    """``n`` groups taken round-robin from each source in turn (each source shuffled with ``seed``, cycled
    when it runs out), so that every step sees NCPQA, LeCoQA and mined queries alike."""
    by = [g.sample(frac=1.0, random_state=seed) for _, g in train.groupby("source", sort=True)]
    rows = [by[i % len(by)].iloc[(i // len(by)) % len(by[i % len(by)])] for i in range(n)]
    return pd.DataFrame(rows).reset_index(drop=True)


def run(args, log=print) -> Path:
    """Prepare the groups, train, save the part; returns the part's JSON path."""
    import torch

    from retrieval.cross_encoder import CrossEncoder, CrossEncoderConfig, TrainConfig, train
    from retrieval.rerank_data import to_groups

    torch.set_num_threads(args.threads)
    t0 = time.perf_counter()
    sources = check_sources(s.strip() for s in args.sources.split(",") if s.strip())
    sets = prepare(args.data_dir, args.version, Path(args.qa), Path(args.corpus), log, sources=sources,
                   negatives_from=args.negatives_from, cache=args.cache, negatives_skip=args.negatives_skip,
                   dev_share=args.dev_share)
    b = sets["bundle"]
    cfg = CrossEncoderConfig(layers=args.layers, max_len=args.max_len, max_query=min(48, args.max_len // 2),
                             precision=args.precision)
    ce = CrossEncoder.from_encoder(b.retriever.encoder, b.model_id, cfg, init=args.init, seed=args.seed)
    ce.module.to(args.device)
    tcfg = TrainConfig(steps=args.steps, batch=args.batch, negatives=args.negatives, max_seconds=args.max_seconds,
                       lr=args.lr, max_len=args.train_max_len, precision=args.precision, seed=args.seed,
                       groups_per_forward=args.groups_per_forward)
    groups = balanced(sets["train"], tcfg.steps * tcfg.batch, tcfg.seed)
    stats = train(ce, to_groups(groups), tcfg, log, shuffle=False)
    ce.module.to("cpu")
    ce.info = {"trained": stats, "threads": args.threads, "device": args.device,
               "negatives_from": args.negatives_from, "negatives_skip": args.negatives_skip,
               "dev_share": args.dev_share,
               "precision": args.precision, "seed": args.seed,
               "init": str(args.init or "encoder (plain e5)"),
               "groups": groups["source"].value_counts().to_dict(), "index_version": b.version,
               "held_out": HELD_OUT,
               "prepare_seconds": round(time.perf_counter() - t0 - stats["seconds"], 1)}
    answer_side = sources == ("ncpqa-sentence",)  # the answer stage's cross-encoder: its own folder and file
    default_out = Path(args.data_dir) / "models" / ("answer-reranker-ce" if answer_side else "reranker-ce")
    weights = args.weights_file or ("answer-reranker.safetensors" if answer_side else "reranker.safetensors")
    out = ce.save(args.out or default_out, weights)
    log(f"cross-encoder part: {out} ({stats})")
    return out


def main(argv: list[str] | None = None) -> int:
    from model.training import PRECISIONS

    ap = argparse.ArgumentParser(prog="python -m flows.train_reranker", description=__doc__.split("\n")[0])
    ap.add_argument("--data-dir", required=True)
    ap.add_argument("--version", default=None)
    ap.add_argument("--qa", default=str(QA))
    ap.add_argument("--corpus", default=str(CORPUS))
    ap.add_argument("--layers", type=int, default=4)
    ap.add_argument("--max-len", type=int, default=192)
    ap.add_argument("--init", default=None, help="BERT-format checkpoint whose layers start the body")
    ap.add_argument("--steps", type=int, default=120)
    ap.add_argument("--batch", type=int, default=4)
    ap.add_argument("--negatives", type=int, default=7)
    ap.add_argument("--max-seconds", type=float, default=600.0)
    ap.add_argument("--lr", type=float, default=3e-5)
    ap.add_argument("--train-max-len", type=int, default=None, help="tokens of a training pair (default --max-len)")
    ap.add_argument("--threads", type=int, default=1)
    ap.add_argument("--precision", default="fp32", choices=PRECISIONS,
                    help="autocast of training and of the saved part's scoring (bf16: ~2x faster on AVX512-BF16 CPUs)")
    ap.add_argument("--seed", type=int, default=13, help="head init and group sampling")
    ap.add_argument("--device", default="cpu",
                    help="where to train: cpu, cuda, cuda:1 (the part is saved from the CPU)")
    ap.add_argument("--groups-per-forward", type=int, default=1,
                    help="groups padded into one forward pass (1 on a CPU; the whole --batch on a GPU)")
    ap.add_argument("--sources", default="ncpqa,lecoqa,mined",
                    help="comma-separated training sources: ncpqa, lecoqa, mined (the search's reranker, the "
                         "default) or ncpqa-sentence (the answer stage's sentence cross-encoder)")
    ap.add_argument("--negatives-from", default="bm25", choices=NEGATIVES_FROM,
                    help="NCPQA/LeCoQA negatives from BM25 or from the hybrid search (dense e5 + BM25, RRF)")
    ap.add_argument("--negatives-skip", type=int, default=0,
                    help="with --negatives-from hybrid: leave out the hybrid's first N hits (unlabelled positives)")
    ap.add_argument("--cache", default=None, help="folder caching the statute pool's e5 vectors (hybrid negatives)")
    ap.add_argument("--dev-share", type=float, default=0.0,
                    help="share of the LeCoQA training questions kept out as a dev split (0: none)")
    ap.add_argument("--out", default=None)
    ap.add_argument("--weights-file", default=None,
                    help="the weights' file name (default reranker.safetensors; answer-reranker.safetensors with "
                         "--sources ncpqa-sentence, the answer stage's part)")
    args = ap.parse_args(argv)
    try:
        run(args)
    except (ValueError, FileNotFoundError) as exc:
        print(f"error: {exc}", file=sys.stderr)
        return 2
    return 0


if __name__ == "__main__":
    sys.exit(main())
