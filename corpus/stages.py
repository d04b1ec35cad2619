"""Text stages as storage-to-storage steps: each reads its input tables, writes its output table(s)
with a manifest, and returns a small JSON-able summary (the stage report). Used by ``tasks/``;
usable from a notebook. Never imports prefect.
"""
from __future__ import annotations

import os
import tempfile
from dataclasses import asdict
from pathlib import Path
from typing import Mapping

import pandas as pd
import pyarrow as pa

from corpus.clean import CleanConfig
from corpus.documents import clean_corpus
from corpus.pairs import PairConfig, build_pairs, split_documents
from corpus.probe import shortcut_probe
from corpus.segment import load_segmenter
from corpus.sentences import SentenceConfig, build_sentences
from corpus.vocab import VocabConfig, build_vocab, load_stopwords
from crawler.csv_import import read_corpus_csv
from crawler.records_import import ColumnMapping, is_record_file, read_records
from storage.contracts import Stage
from storage.mapped import StalePlanError, plan_ranges, read_parts, write_part
from storage import (
    file_sha256,
    json_sha256,
    manifest_fingerprint,
    read_manifest,
    read_table,
    text_sha256,
    write_table,
)


DOCUMENTS_SCHEMA = pa.schema([
    ("doc_id", pa.string()), ("source_id", pa.string()), ("source", pa.string()), ("url", pa.string()),
    ("title", pa.string()), ("pubtime", pa.date32()), ("issuer", pa.string()), ("doc_number", pa.string()),
    ("written_date", pa.date32()),
    ("content_type", pa.string()), ("fetched_at", pa.timestamp("s", tz="UTC")), ("raw_sha256", pa.string()),
    ("citation", pa.string()), ("text", pa.string()), ("external_id", pa.string()),
])


def import_documents(input_path: str | os.PathLike, out_dir: str | os.PathLike,
                     sources_csv: str | os.PathLike | None = None, rows_per_shard: int = 50_000,
                     columns: Mapping[str, str | None] | None = None) -> dict:
    """A corpus file -> ``documents`` table.

    ``input_path`` is the CSV export (``title,pubtime,channel,describes,contentText``, joined with
    ``sources_csv`` for URLs) or, with a ``.jsonl``/``.jsonl.gz``/``.ndjson``/``.parquet`` suffix, a record
    collection read with ``columns`` (the fields of :class:`crawler.records_import.ColumnMapping`, e.g.
    ``{"id_column": "article_id", "text_column": "text", "title_column": "law_title"}``); its ids are kept as
    ``external_id`` and its rejected records (line, reason) go to the manifest's stats.

    Raises:
        crawler.csv_import.InputError: bad input (the message names the file and, where known, the line).
    """
    rejects: list[dict] = []
    if is_record_file(input_path):
        docs, report, rejects = read_records(input_path, ColumnMapping(**(columns or {})))
    else:
        docs, report = read_corpus_csv(input_path, sources_csv)
        docs["external_id"] = None
    stats = {"documents": int(len(docs)), "sources": int(docs["source"].nunique()),
             "with_url": int(docs["url"].notna().sum()), "warnings": dict(report.warnings),
             "rejected_records": len(rejects), "rejects": rejects[:100]}
    inputs = {"input": file_sha256(input_path)}
    if sources_csv and Path(sources_csv).is_file() and not is_record_file(input_path):
        inputs["sources_csv"] = file_sha256(sources_csv)
    write_table(docs, out_dir, name="documents", code_version=IMPORT.code_version(), config=dict(columns or {}),
                inputs=inputs, stats=stats, rows_per_shard=rows_per_shard, schema=DOCUMENTS_SCHEMA)
    return stats


def clean_stage(documents_dir, out_dir, rejects_dir, cfg: CleanConfig) -> dict:
    """``documents`` -> ``documents_clean`` + ``rejects`` (SPEC §3)."""
    docs = read_table(documents_dir)
    for column in ("external_id", "written_date"):  # absent from crawls and from tables of older versions
        if column not in docs:
            docs[column] = None
    clean, rejects, stats = clean_corpus(docs, cfg)
    inputs = {"documents": manifest_fingerprint(documents_dir)}
    cv = CLEAN.code_version()
    write_table(rejects, rejects_dir, name="rejects", config=asdict(cfg), code_version=cv, inputs=inputs,
                stats={"rejects_by_reason": stats["rejects_by_reason"]})
    schema = DOCUMENTS_SCHEMA.append(pa.field("n_chars", pa.int64())).append(
        pa.field("rules_applied", pa.list_(pa.string())))
    write_table(clean, out_dir, name="documents_clean", config=asdict(cfg), code_version=cv, inputs=inputs,
                stats=stats, schema=schema)
    return stats


def sentences_stage(clean_dir, out_dir, cfg: SentenceConfig) -> dict:
    """``documents_clean`` -> ``sentences`` (SPEC §4)."""
    sents, stats = build_sentences(read_table(clean_dir, ["doc_id", "text"]), cfg)
    write_table(sents, out_dir, name="sentences", config=asdict(cfg), code_version=SENTENCES.code_version(),
                inputs={"documents_clean": manifest_fingerprint(clean_dir)}, stats=stats)
    return stats


def _cache_dir(cache_root, backend: str, model_id: str) -> Path | None:
    return Path(cache_root) / json_sha256([backend, model_id])[:16] if cache_root else None


def _read_cache(cache_dir: Path | None) -> dict[str, list]:
    """Segmentation cache: sentence sha256 -> words ({} when there is none yet)."""
    if cache_dir is None or not (cache_dir / "manifest.json").is_file():
        return {}
    c = read_table(cache_dir)
    return dict(zip(c["sentence_sha256"], c["words"]))


def segment_plan(sentences_dir, n_parts: int) -> dict:
    """The plan of a partitioned segmentation: ``{"input": sentences fingerprint, "rows": n,
    "ranges": [[lo, hi), ...]}`` (``n_parts`` contiguous row ranges). JSON-able; passed to every part."""
    rows = int(read_manifest(sentences_dir)["rows"])
    return {"input": manifest_fingerprint(sentences_dir), "rows": rows, "ranges": plan_ranges(rows, n_parts)}


def segment_part(sentences_dir, plan: dict, part: int, out_file, backend: str = "auto",
                 user_dict: str | None = None, cache_root: str | os.PathLike | None = None) -> dict:
    """Segment the rows ``plan["ranges"][part]`` of ``sentences`` into the Parquet file ``out_file``
    (doc_id, sent_idx, words, sentence_sha256, fresh); words of sentences in the segmentation cache are
    reused. Returns the part record (path, sha256, rows, fresh, backend, model_id).

    Raises:
        StalePlanError: ``sentences`` changed since the plan was made.
    """
    if manifest_fingerprint(sentences_dir) != plan["input"]:
        raise StalePlanError(f"{sentences_dir} changed since the segmentation plan was made")
    lo, hi = plan["ranges"][part]
    sents = read_table(sentences_dir, ["doc_id", "sent_idx", "text"]).iloc[lo:hi]
    seg = load_segmenter(backend, user_dict)
    keys = [text_sha256(t) for t in sents["text"]]
    cached = _read_cache(_cache_dir(cache_root, seg.backend, seg.model_id))
    todo = sorted({k: t for k, t in zip(keys, sents["text"]) if k not in cached}.items())
    fresh = dict(zip([k for k, _ in todo], seg.segment([t for _, t in todo]))) if todo else {}
    part_df = pd.DataFrame({"doc_id": sents["doc_id"].to_numpy(), "sent_idx": sents["sent_idx"].to_numpy(),
                            "words": [list(cached[k]) if k in cached else fresh[k] for k in keys],
                            "sentence_sha256": keys, "fresh": [k in fresh for k in keys]})
    return write_part(part_df, out_file, part=part, fresh=len(fresh), backend=seg.backend, model_id=seg.model_id)


def merge_segments(sentences_dir, parts: list[dict], out_dir, backend: str = "auto", user_dict: str | None = None,
                   cache_root: str | os.PathLike | None = None) -> dict:
    """Assemble the part files of ``parts`` (records from :func:`segment_part`, in part order) into the
    ``segments`` table and add the newly segmented sentences to the segmentation cache.

    Raises:
        StalePlanError: a part file is missing or changed, or the parts do not cover ``sentences``.
    """
    merged_parts = read_parts(parts)
    if len(merged_parts) != int(read_manifest(sentences_dir)["rows"]):
        raise StalePlanError(f"the segmented parts hold {len(merged_parts)} rows, {sentences_dir} has more or fewer")
    seg_backend, model_id = parts[0]["backend"], parts[0]["model_id"]
    cache_dir = _cache_dir(cache_root, seg_backend, model_id)
    fresh = merged_parts[merged_parts["fresh"]]
    if cache_dir is not None and len(fresh):
        merged = _read_cache(cache_dir)
        merged.update(zip(fresh["sentence_sha256"], fresh["words"]))
        write_table(pd.DataFrame({"sentence_sha256": list(merged), "words": [list(v) for v in merged.values()]}),
                    cache_dir, name="segment_cache", config={"backend": seg_backend, "model_id": model_id},
                    code_version=SEGMENT.code_version())
    out = merged_parts[["doc_id", "sent_idx"]].copy()
    out["words"] = [list(w) for w in merged_parts["words"]]
    stats = {"sentences": int(len(out)), "words": int(sum(map(len, out["words"]))), "backend": seg_backend,
             "model_id": model_id, "chars": int(sum(len("".join(w)) for w in out["words"])),
             "segmented_now": int(fresh["sentence_sha256"].nunique()), "from_cache": int((~merged_parts["fresh"]).sum()),
             "parts": len(parts)}
    write_table(out, out_dir, name="segments", config={"backend": backend, "user_dict": user_dict,
                                                       "resolved_backend": seg_backend, "model_id": model_id},
                code_version=SEGMENT.code_version(), inputs={"sentences": manifest_fingerprint(sentences_dir)},
                stats=stats)
    return stats


def segment_stage(sentences_dir, out_dir, backend: str = "auto", user_dict: str | None = None,
                  cache_root: str | os.PathLike | None = None, n_parts: int = 1) -> dict:
    """``sentences`` -> ``segments`` (doc_id, sent_idx, words) with the backend recorded, in one process:
    :func:`segment_plan`, :func:`segment_part` for each part (into a temporary folder), :func:`merge_segments`.

    With ``cache_root``, words are cached per sentence sha256 in a table under
    ``cache_root/<backend model id hash>/``, so a re-run segments only sentences it has not seen.
    """
    plan = segment_plan(sentences_dir, n_parts)
    with tempfile.TemporaryDirectory() as tmp:
        parts = [segment_part(sentences_dir, plan, i, Path(tmp) / f"part-{i:05d}.parquet", backend, user_dict,
                              cache_root) for i in range(n_parts)]
        return merge_segments(sentences_dir, parts, out_dir, backend, user_dict, cache_root)


def vocab_stage(segments_dir, out_dir, stopwords_path: str | None, cfg: VocabConfig) -> dict:
    """``segments`` -> ``vocab`` table + ``vocab.txt`` (one word per line, freq order)."""
    segs = read_table(segments_dir)
    seg_manifest = read_manifest(segments_dir)
    vocab, stats = build_vocab(segs["words"], segs["doc_id"], load_stopwords(stopwords_path), cfg)
    stats.update(backend=seg_manifest["stats"].get("backend"), model_id=seg_manifest["stats"].get("model_id"))
    inputs = {"segments": manifest_fingerprint(segments_dir)}
    if stopwords_path:
        inputs["stopwords"] = file_sha256(stopwords_path)
    txt = ("\n".join(vocab["word"]) + "\n").encode("utf-8")
    write_table(vocab, out_dir, name="vocab", config={**asdict(cfg), "stopwords": stopwords_path},
                code_version=VOCAB.code_version(), inputs=inputs, stats=stats,
                extra_files={"vocab.txt": txt})
    return stats


def document_splits(clean_dir, cfg: PairConfig) -> dict[str, str]:
    """doc_id -> train/dev/test for the cleaned corpus (seeded; shared by pairs and pretraining)."""
    ids = read_table(clean_dir, ["doc_id"])["doc_id"].tolist()
    return split_documents(ids, cfg.split_ratios, cfg.seed)


def datasets_stage(sentences_dir, clean_dir, out_dirs: Mapping[str, str | os.PathLike], cfg: PairConfig,
                   rows_per_shard: int = 50_000) -> dict:
    """``sentences`` -> ``policysm1`` and ``policysm2`` tables (split=train/dev/test) + probe results.

    ``out_dirs`` maps ``"policysm1"`` and ``"policysm2"`` to their table folders.
    """
    sents = read_table(sentences_dir, ["doc_id", "sent_idx", "clauses"])
    split_of = document_splits(clean_dir, cfg)
    inputs = {"sentences": manifest_fingerprint(sentences_dir), "documents_clean": manifest_fingerprint(clean_dir)}
    out = {}
    for name in ("policysm1", "policysm2"):
        pairs, stats = build_pairs(sents, split_of, name, cfg)
        stats["probe"] = shortcut_probe(pairs)
        cfg_json = {**asdict(cfg), "dataset": name}
        write_table(pairs, out_dirs[name], name=name, config=cfg_json, code_version=DATASETS.code_version(),
                    inputs=inputs, stats=stats, rows_per_shard=rows_per_shard, partition_by="split")
        out[name] = stats
    return out


# Stage contracts (see storage.contracts): what each text stage reads, writes, runs and is configured by.
IMPORT = Stage("import-documents", "corpus.stages:import_documents", writes=("documents",),
               code=("crawler.csv_import", "crawler.records_import", "storage"), files=("input_path", "sources_csv"))
CLEAN = Stage("clean", "corpus.stages:clean_stage", reads=("documents",), writes=("documents_clean", "rejects"),
              code=("corpus.documents", "storage"), config=CleanConfig)
SENTENCES = Stage("sentences", "corpus.stages:sentences_stage", reads=("documents_clean",), writes=("sentences",),
                  code=("corpus.sentences", "storage"), config=SentenceConfig)
SEGMENT_PLAN = Stage("segment-plan", "corpus.stages:segment_plan", reads=("sentences",), code=("storage.mapped",))
SEGMENT_PART = Stage("segment-part", "corpus.stages:segment_part", reads=("sentences",), code=("corpus.segment", "storage.mapped"),
                     files=("user_dict",), scratch=("cache/segments", "cache/parts/segment-part"))
SEGMENT = Stage("segment", "corpus.stages:merge_segments", reads=("sentences",), writes=("segments",),
                code=("corpus.segment", "storage.mapped"), files=("user_dict",),
                scratch=("cache/segments", "cache/parts/segment-part"))
VOCAB = Stage("vocab", "corpus.stages:vocab_stage", reads=("segments",), writes=("vocab",),
              code=("corpus.vocab", "storage"), config=VocabConfig, files=("stopwords",))
DATASETS = Stage("datasets", "corpus.stages:datasets_stage", reads=("sentences", "documents_clean"),
                 writes=("policysm1", "policysm2"), code=("corpus.pairs", "corpus.probe", "storage"), config=PairConfig)
REPORT = Stage("dataset-report", "corpus.report:build_report",
               reads=("documents", "documents_clean", "rejects", "sentences", "vocab", "policysm1", "policysm2"),
               writes=("report",), code=("corpus.report",))
STAGES = (IMPORT, CLEAN, SENTENCES, SEGMENT_PLAN, SEGMENT_PART, SEGMENT, VOCAB, DATASETS, REPORT)
