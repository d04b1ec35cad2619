"""Retrieval stages over storage (SPEC §7): index plan, embedding parts, publish, retrieval training and the
evaluation; the search API is :mod:`retrieval.retrievers`. Never imports prefect."""
from __future__ import annotations

import json
import logging
import os
from dataclasses import asdict
from pathlib import Path
from typing import Callable

import pandas as pd

from retrieval.build import embed_staged, publish_staged, stage_refresh, staging_dir
from retrieval.chunks import ChunkConfig, build_chunks
from retrieval.contracts import EVALUATE, INDEX
from retrieval.dense import IndexConfig
from retrieval.encoders import Encoder, RetrievalInfo, checkpoint_type
from retrieval.evaluate import EvalConfig, ann_recalls, read_queries, untrained_rows, version_rows
from retrieval.fusion import FusionConfig
from retrieval.mining import mine_pairs_from, mine_queries_from
from retrieval.parts import FittedPart, PartSource, write_parts
from retrieval.serving_parts import index_inputs, part_sources, serving_parts
from retrieval.versions import read_manifest as version_manifest
from retrieval.pinning import model_id, pin_encoder
from model.backbone_stage import has_checkpoint
from retrieval.retrievers import Retriever
from retrieval.select import EncoderChoiceConfig, choose_encoder, dev_docs, merge_char_body, write_choice
from retrieval.sparse import SparseConfig, make_tokenizer
from retrieval.train import RetrievalTrainConfig, train_retrieval
from storage import json_sha256, manifest_fingerprint, read_manifest, read_table, write_table
from storage.tables import iter_table
from storage.mapped import StalePlanError

log = logging.getLogger(__name__)


def _inputs_key(clean_dir, ckpt_dir, cfg: ChunkConfig, index_cfg: IndexConfig) -> str:
    return json_sha256([manifest_fingerprint(clean_dir), model_id(ckpt_dir), asdict(cfg), asdict(index_cfg)])


def index_plan_stage(clean_dir, ckpt_dir, index_root, cfg: ChunkConfig, index_cfg: IndexConfig = IndexConfig(),
                     staging: str | os.PathLike | None = None) -> dict:
    """Chunk ``documents_clean`` and stage a refresh plan (which chunks to embed) in ``staging`` (default
    ``index/.staging``). Chunks carry the documents' ``external_id`` when the table has one."""
    columns = ["doc_id", "text", "title", "source", "url"]
    if "external_id" in read_manifest(clean_dir)["columns"]:
        columns.append("external_id")
    docs = read_table(clean_dir, columns)
    chunks = build_chunks(docs, cfg)
    plan = stage_refresh(index_root, chunks, model_id(ckpt_dir), index_cfg, staging or staging_dir(index_root),
                         extra={"inputs_key": _inputs_key(clean_dir, ckpt_dir, cfg, index_cfg)})
    return {"chunks": int(len(chunks)), "to_embed": len(plan["todo"]), "reused": len(plan["reuse_rows"])}


def index_embed_part_stage(ckpt_dir, index_root, part: int, n_parts: int, batch_size: int = 64,
                           device: str = "auto", on_progress=None, *, staging: str | os.PathLike | None = None,
                           out_file: str | os.PathLike | None = None,
                           load_encoder: Callable[[Callable[[], Encoder], str], Encoder] | None = None,
                           precision: str | None = None) -> int:
    """Embed one of ``n_parts`` slices of the chunks planned in ``staging`` (default ``index/.staging``) into
    ``out_file`` (default: beside the plan); mapped over parts, GPU when present. Returns rows embedded.
    Without a staged plan it does nothing: the publish step plans and embeds what is missing.
    ``load_encoder(load, model_id)``: how the encoder is obtained (e.g. once per Dask worker for the plan's
    ``model_id``); default ``load()``. ``precision``: the forward's autocast (:data:`model.training.PRECISIONS`;
    None: the encoder kind's default, :meth:`retrieval.encoders.Encoder.from_checkpoint`)."""
    staging = Path(staging or staging_dir(index_root))
    if not (staging / "plan.json").is_file():
        return 0
    planned = json.loads((staging / "plan.json").read_text())["model_id"]

    def load() -> Encoder:
        return Encoder.from_checkpoint(ckpt_dir, batch_size, device, precision=precision)

    encoder = load_encoder(load, f"{planned}:{batch_size}:{device}:{precision}") if load_encoder else load()
    encoder.on_progress = on_progress
    return embed_staged(staging, encoder.encode_corpus, part, n_parts, out_file=out_file)


def index_publish_stage(clean_dir, ckpt_dir, index_root, cfg: ChunkConfig, index_cfg: IndexConfig = IndexConfig(),
                        n_parts: int = 1, batch_size: int = 64, device: str = "auto", *,
                        precision: str | None = None,
                        sparse: SparseConfig | None = SparseConfig(), fusion: FusionConfig = FusionConfig(),
                        tokenizer=None, staging: str | os.PathLike | None = None,
                        parts: list[dict] | None = None, fitted_parts: tuple[FittedPart, ...] = (),
                        **part_files) -> dict:
    """Publish the refresh staged in ``staging`` (default ``index/.staging``, re-planned if missing or stale;
    with an explicit ``staging`` it is kept for the cache) as ``index/vN`` and switch ``index/CURRENT``.
    ``parts``: the embedded parts' records (``path``, ``sha256``) in part order (mapped embedding); without
    them any part not staged is embedded here.

    The version pins its encoder (a copy under ``index/models/<model_id>/``, ``encoder_dir`` in the
    manifest) and, unless ``sparse`` is None, holds the BM25 side (``sparse/``) and the hybrid weights
    fitted on titles and lead sentences of ``documents_clean`` (``fusion`` in the manifest).
    ``tokenizer``: an already loaded ``make_tokenizer(sparse.segmenter)`` result (else loaded here).

    The version is the unit serving loads (:mod:`retrieval.parts`): it also holds the texts of its documents
    (``texts`` part) and every declared serving part (:mod:`retrieval.serving_parts`) whose input file
    ``part_files`` gives (``{index-stage input: path}``: ``reranker``, ``answer_scorer``, ``answer_reranker``,
    ...), installed when its provenance matches the version's pins (else the part records why it was
    refused). ``fitted_parts`` (:class:`retrieval.parts.FittedPart`) are fitted on the staged version itself,
    after the other parts and before ``CURRENT`` switches (:mod:`answers.stages`); a part of the same name
    given as a file is then not installed; the inputs of a fit (a question set) are accepted and not installed.

    ``precision``: the autocast missing and masked chunks are embedded with (None: the encoder kind's default).

    Returns the publication's stats (:func:`retrieval.build.publish_staged`), ``chunks``, ``documents`` and
    ``serving_parts``: per serving part its record without the long fields (``provenance``), a refused part's reason,
    a fitted part's figures.

    Raises:
        retrieval.pinning.EncoderMismatchError: the checkpoint changed after the plan was made.
        TypeError: a ``part_files`` input no declared part reads.
    """
    keep = staging is not None
    staging = Path(staging or staging_dir(index_root))
    plan_path = staging / "plan.json"
    key = _inputs_key(clean_dir, ckpt_dir, cfg, index_cfg)
    if not plan_path.is_file() or json.loads(plan_path.read_text()).get("inputs_key") != key:
        if parts is not None:
            raise StalePlanError(f"the index plan in {staging} is missing or stale: re-run the index plan")
        index_plan_stage(clean_dir, ckpt_dir, index_root, cfg, index_cfg, staging=staging)
    planned_id = json.loads(plan_path.read_text())["model_id"]
    encoder_dir = pin_encoder(index_root, ckpt_dir, planned_id)
    pinned = Path(index_root) / encoder_dir
    manifest = _base_manifest(clean_dir, ckpt_dir, index_root, cfg, encoder_dir, pinned)
    factory = _encoder_factory(pinned, batch_size, device, precision)
    kw = _sparse_kwargs(clean_dir, sparse, fusion, tokenizer, factory) if sparse is not None else {}
    sources = _part_sources(part_files, {f.name for f in fitted_parts})

    def serving_parts(vdir: Path, man: dict, chunks: pd.DataFrame) -> dict:
        return write_parts(vdir, man, clean_dir, chunks["doc_id"].unique(), sources, tuple(fitted_parts),
                           index_root)

    stats = publish_staged(index_root, staging, n_parts, lambda: factory().encode_corpus, manifest, parts=parts,
                           keep_staging=keep, serving_parts=serving_parts, **kw)
    chunks = pd.read_parquet(Path(index_root) / stats["version"] / "chunks.parquet", columns=["doc_id"])
    published = (version_manifest(index_root, stats["version"]).get("parts") or {})
    return {**stats, "chunks": int(len(chunks)), "documents": int(chunks["doc_id"].nunique()),
            "serving_parts": {n: {k: v for k, v in rec.items() if k != "provenance"} for n, rec in published.items()}}


def _base_manifest(clean_dir, ckpt_dir, index_root, cfg: ChunkConfig, encoder_dir: str, pinned: Path) -> dict:
    """The manifest fields every published version starts from: chunk config, code version, the encoder
    (its source folder, its pinned copy, its retrieval settings), the metric and the input fingerprint."""
    info = RetrievalInfo.load(pinned, checkpoint_type(pinned))
    return {"config": asdict(cfg), "code_version": INDEX.code_version(),
            "model_dir": os.path.relpath(Path(ckpt_dir).resolve(), Path(index_root).resolve()),
            "encoder_dir": encoder_dir, "retrieval": asdict(info),
            "metric": "inner_product", "inputs": {"documents_clean": manifest_fingerprint(clean_dir)}}


def _sparse_kwargs(clean_dir, sparse: SparseConfig, fusion: FusionConfig, tokenizer, factory) -> dict:
    """The BM25 side's arguments of :func:`retrieval.build.publish_staged`: the fusion weights are fitted on
    the lead-sentence queries mined from ``clean_dir`` only (the retrieval evaluation reports title queries,
    and the fusion is never fitted on the figures it reports, SPEC §7)."""
    queries = mine_queries_from(iter_table(clean_dir, ["doc_id", "text", "title"]), fusion)
    queries = queries[queries["kind"] == "lead"].reset_index(drop=True)
    return dict(sparse=sparse, fusion_queries=queries, fusion=fusion,
                tokenizer=(lambda: tokenizer) if tokenizer else None,
                query_embed_factory=lambda: factory().encode_queries)


def _part_sources(part_files: dict, fitted: set[str]) -> tuple[PartSource, ...]:
    """The serving parts installed from the files ``part_files`` names (``{index-stage input: path}``, the
    inputs the declared parts read: :mod:`retrieval.serving_parts`), in declaration order (the answer
    cross-encoder before the answer scorer that may pin it), those in ``fitted`` left out.

    Raises:
        TypeError: an input no declared part reads."""
    declared = serving_parts()
    unknown = sorted(set(part_files) - set(index_inputs(declared)))
    if unknown:
        raise TypeError(f"index_publish_stage: no serving part reads {unknown}")
    return part_sources(declared, part_files, skip=fitted)


def _encoder_factory(ckpt_dir, batch_size: int, device: str, precision: str | None = None):
    """A factory that loads the encoder once, however often it is called (``precision``: its autocast, None:
    the encoder kind's default)."""
    cache: dict = {}

    def make():
        if "enc" not in cache:
            cache["enc"] = Encoder.from_checkpoint(ckpt_dir, batch_size, device, precision=precision)
        return cache["enc"]

    return make


def index_stage(clean_dir, ckpt_dir, index_root, cfg: ChunkConfig, index_cfg: IndexConfig = IndexConfig(),
                batch_size: int = 64, device: str = "auto", on_progress=None, n_parts: int = 1, *,
                precision: str | None = None,
                sparse: SparseConfig | None = SparseConfig(), fusion: FusionConfig = FusionConfig(),
                tokenizer=None, fitted_parts: tuple[FittedPart, ...] = (), **part_files) -> dict:
    """Chunk ``documents_clean`` and publish the next ``index/vN``, embedding only new/changed chunks,
    in one process (plan, every part, publish with the sparse side, fitted hybrid weights and the serving
    parts: the texts and, given, ``answer_scorer``, ``reranker`` and ``fitted_parts``; see
    :func:`index_publish_stage`)."""
    index_plan_stage(clean_dir, ckpt_dir, index_root, cfg, index_cfg)
    for part in range(n_parts):
        index_embed_part_stage(ckpt_dir, index_root, part, n_parts, batch_size, device, on_progress,
                               precision=precision)
    return index_publish_stage(clean_dir, ckpt_dir, index_root, cfg, index_cfg, n_parts, batch_size, device,
                               precision=precision, sparse=sparse, fusion=fusion, tokenizer=tokenizer, fitted_parts=fitted_parts,
                               **part_files)


def retrieval_train_stage(clean_dir, ckpt_dir, out_dir, cfg=None, segmenter: str = "auto", log=print) -> dict:
    """Retrieval-train an encoder (:mod:`retrieval.train`): mine query/passage pairs from
    ``documents_clean`` (titles, headings, ICT sentences; no held-out questions), fine-tune the encoder
    of ``ckpt_dir`` (the fine-tuned PolicyBERT, or a local HF BERT sentence encoder such as
    bge-base-zh-v1.5) with InfoNCE over in-batch and mined hard negatives, and save an HF checkpoint with
    ``retrieval.json`` (pooling, query instruction) and ``metrics.json`` to ``out_dir`` (atomically).

    Args:
        cfg: :class:`retrieval.train.RetrievalTrainConfig` (default: sized for cpu-small on 2 cores).
        segmenter: tokenizer backend of the BM25 baseline on the dev pairs.

    The run is resumable (a restarted stage continues from its last saved step) and keeps the checkpoint with
    the best dev MRR@10; the documents are read shard by shard.

    Returns:
        {"out_dir", "pairs", "dev_before", "dev_bm25", "dev_after", "test_before", "test_bm25", "test_after",
        "best_step", "seconds", "retrieval", "model_id"} (a held-out figure is None when its set is empty).

    Raises:
        ValueError: too few pairs mined from the corpus.
    """
    cfg = cfg or RetrievalTrainConfig()
    pairs = mine_pairs_from(iter_table(clean_dir, ["doc_id", "text", "title"]), cfg)
    metrics = train_retrieval(ckpt_dir, pairs, out_dir, cfg, make_tokenizer(segmenter)[0], log)
    keys = ("pairs", "dev_before", "dev_bm25", "dev_after", "test_before", "test_bm25", "test_after", "best_step",
            "seconds", "retrieval")
    return {"out_dir": str(out_dir), **{k: metrics.get(k) for k in keys}, "model_id": model_id(out_dir)}


def evaluate_stage(clean_dir, index_root, out_dir, segmenter: str = "auto", seed: int = 13, *,
                   cfg: EvalConfig | None = None, tokenizer=None, precision: str | None = None) -> dict:
    """Known-item evaluation of the serving index version (:mod:`retrieval.evaluate`): its dense side, its
    own BM25 side and its hybrid, the untrained encoder (up to ``cfg.untrained_max_chunks`` chunks, else over a
    document sample beside the version's vectors on it: :func:`retrieval.evaluate.untrained_rows`) and the
    IVF/HNSW recall@10 against exact search on the evaluation's queries.

    ``segmenter`` is not used for ranking (the BM25 row tokenizes with the segmenter recorded in the version);
    ``seed`` initialises the untrained encoder unless ``cfg`` is given; ``tokenizer``: an already loaded
    ``make_tokenizer`` result of that segmenter; ``precision``: the autocast the untrained encoder embeds its
    passages with (the index's ``embed_precision``: the baseline costs what the index's embedding costs). Writes
    the table (system, recall@1/5/10, mrr@10, queries) to ``out_dir`` and returns ``{"table": records, **ann recalls, "queries"}``.

    Raises:
        FileNotFoundError: no index published.
    """
    cfg = cfg or EvalConfig(seed=seed)
    r = Retriever(index_root, tokenizer=tokenizer)
    version = r.manifest["version"]
    queries = read_queries(clean_dir)
    rows = version_rows(r, queries, cfg)
    untrained = untrained_rows(r, index_root, queries, cfg, precision)
    rows[1:1] = untrained
    table = pd.DataFrame(rows)
    extra = ann_recalls(r, queries)
    if r.manifest.get("fusion"):
        extra["fusion_w_dense"] = r.manifest["fusion"]["w_dense"]
    extra["untrained_skipped"] = not untrained
    extra["untrained_sampled"] = any(row["system"].endswith("@sample") for row in untrained)
    write_table(table, out_dir, name="retrieval_eval", config={"segmenter": segmenter, **asdict(cfg)},
                code_version=EVALUATE.code_version(), inputs={"index": f"{version}:{r.manifest['model_id']}"},
                stats={**extra, "queries": int(len(queries)), "index_version": version})
    return {"table": table.to_dict("records"), **extra, "queries": int(len(queries))}


def retrieval_encoder_stage(clean_dir, finetuned_dir, e5_dir, backbone_dir, out_dir, cfg: EncoderChoiceConfig,
                            scratch_dir) -> dict:
    """Choose the index's encoder on a dev split of lead-sentence queries (:mod:`retrieval.select`, SPEC §7-§8)
    and copy it to ``out_dir`` with ``choice.json``.

    Candidates: ``pretrained`` (``e5_dir``, when the backbone stage converted one), ``finetuned`` (the
    PolicySM-1 fine-tuned PolicyBERT; beside a pretrained encoder only when ``cfg.score_finetuned``) and, when
    its char body was initialised from ``backbone_dir``, ``merged-<alpha>`` for each ``cfg.merge_alphas`` (built
    under ``scratch_dir``, the pretrained encoder's pooling and instructions kept).
    """
    candidates = {"pretrained": e5_dir} if has_checkpoint(e5_dir) else {}
    if cfg.score_finetuned or not candidates:
        candidates["finetuned"] = finetuned_dir
    if has_checkpoint(backbone_dir):
        for alpha in cfg.merge_alphas:
            try:
                candidates[f"merged-{alpha:g}"] = merge_char_body(
                    finetuned_dir, backbone_dir, alpha, Path(scratch_dir) / f"merged-{alpha:g}",
                    Path(e5_dir, "retrieval.json") if has_checkpoint(e5_dir) else None)
            except ValueError as exc:  # the fine-tuned model did not start from this backbone
                log.warning("no merged candidate: %s", exc)
                break
    if len(candidates) > 1:
        docs = dev_docs(iter_table(clean_dir, ["doc_id", "text"]), read_manifest(clean_dir)["rows"], cfg)
        choice = choose_encoder(candidates, docs, cfg)
    else:  # one candidate: nothing to choose between
        (name, folder), = candidates.items()
        choice = {"chosen": name, "dir": str(folder), "table": [], "dev": {}, "config": asdict(cfg)}
    write_choice(choice, out_dir)
    return {"chosen": choice["chosen"], "table": choice["table"], "dev": choice["dev"]}
