"""Text stages as storage-to-storage steps: each reads its input tables, writes its output table(s)
with a manifest, and returns a small JSON-able summary (the stage report). Used by ``tasks/``;
usable from a notebook. Never imports prefect.
"""
from __future__ import annotations

import json
import os
import shutil
from dataclasses import asdict
from pathlib import Path

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
from storage import (
    atomic_write_bytes,
    code_version,
    file_sha256,
    json_sha256,
    manifest_fingerprint,
    read_manifest,
    read_table,
    text_sha256,
    write_table,
)

TEXT_PACKAGES = ("corpus", "storage")

DOCUMENTS_SCHEMA = pa.schema([
    ("doc_id", pa.string()), ("source_id", pa.string()), ("source", pa.string()), ("url", pa.string()),
    ("title", pa.string()), ("pubtime", pa.date32()), ("issuer", pa.string()), ("doc_number", pa.string()),
    ("content_type", pa.string()), ("fetched_at", pa.timestamp("s", tz="UTC")), ("raw_sha256", pa.string()),
    ("citation", pa.string()), ("text", pa.string()),
])


def import_documents(input_csv: str | os.PathLike, out_dir: str | os.PathLike,
                     sources_csv: str | os.PathLike | None = None, rows_per_shard: int = 50_000) -> dict:
    """CSV export -> ``documents`` table. Raises crawler.csv_import.InputError on bad input."""
    docs, report = read_corpus_csv(input_csv, sources_csv)
    stats = {"documents": int(len(docs)), "sources": int(docs["source"].nunique()),
             "with_url": int(docs["url"].notna().sum()), "warnings": dict(report.warnings)}
    inputs = {"input_csv": file_sha256(input_csv)}
    if sources_csv and Path(sources_csv).is_file():
        inputs["sources_csv"] = file_sha256(sources_csv)
    write_table(docs, out_dir, name="documents", code_version=code_version(["crawler", "storage"]),
                inputs=inputs, stats=stats, rows_per_shard=rows_per_shard, schema=DOCUMENTS_SCHEMA)
    return stats


def clean_stage(documents_dir, out_dir, rejects_dir, cfg: CleanConfig) -> dict:
    """``documents`` -> ``documents_clean`` + ``rejects`` (SPEC §3)."""
    docs = read_table(documents_dir)
    clean, rejects, stats = clean_corpus(docs, cfg)
    inputs = {"documents": manifest_fingerprint(documents_dir)}
    cv = code_version(TEXT_PACKAGES)
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
    write_table(sents, out_dir, name="sentences", config=asdict(cfg), code_version=code_version(TEXT_PACKAGES),
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


def parts_dir(out_dir) -> Path:
    """Where the partitions of a partitioned stage are staged before the merge: ``.<name>.parts`` beside it."""
    out = Path(out_dir)
    return out.parent / f".{out.name}.parts"


def segment_part(sentences_dir, out_dir, part: int, n_parts: int, backend: str = "auto",
                 user_dict: str | None = None, cache_root: str | os.PathLike | None = None) -> dict:
    """Segment rows ``[part * n / n_parts, (part + 1) * n / n_parts)`` of ``sentences`` into a staged part
    file (``parts_dir(out_dir)/part-NNNNN.parquet``); words of sentences in the segmentation cache are reused.

    Parts can run in any order and in parallel (threads, processes, Dask workers); :func:`merge_segments`
    assembles them in order, so the result does not depend on the scheduling.
    """
    sents = read_table(sentences_dir, ["doc_id", "sent_idx", "text"])
    lo, hi = part * len(sents) // n_parts, (part + 1) * len(sents) // n_parts
    sents = sents.iloc[lo:hi]
    seg = load_segmenter(backend, user_dict)
    keys = [text_sha256(t) for t in sents["text"]]
    cached = _read_cache(_cache_dir(cache_root, seg.backend, seg.model_id))
    todo = sorted({k: t for k, t in zip(keys, sents["text"]) if k not in cached}.items())
    fresh = dict(zip([k for k, _ in todo], seg.segment([t for _, t in todo]))) if todo else {}
    part_df = pd.DataFrame({"doc_id": sents["doc_id"].to_numpy(), "sent_idx": sents["sent_idx"].to_numpy(),
                            "words": [list(cached[k]) if k in cached else fresh[k] for k in keys],
                            "sentence_sha256": keys, "fresh": [k in fresh for k in keys]})
    folder = parts_dir(out_dir)
    folder.mkdir(parents=True, exist_ok=True)
    meta = {"backend": seg.backend, "model_id": seg.model_id, "rows": len(part_df), "fresh": len(fresh)}
    atomic_write_bytes(folder / f"part-{part:05d}.parquet", _parquet_bytes(part_df))
    atomic_write_bytes(folder / f"part-{part:05d}.json", json.dumps(meta).encode())
    return meta


def merge_segments(sentences_dir, out_dir, n_parts: int, backend: str = "auto", user_dict: str | None = None,
                   cache_root: str | os.PathLike | None = None) -> dict:
    """Assemble the staged parts (in part order) into the ``segments`` table, add the newly segmented
    sentences to the cache, and remove the staging folder. A part that is not staged (its task was a
    cache hit of an earlier run, or did not finish) is segmented here.
    """
    folder = parts_dir(out_dir)
    for i in range(n_parts):
        if not (folder / f"part-{i:05d}.json").is_file():
            segment_part(sentences_dir, out_dir, i, n_parts, backend, user_dict, cache_root)
    metas = [json.loads((folder / f"part-{i:05d}.json").read_text()) for i in range(n_parts)]
    parts = pd.concat([pd.read_parquet(folder / f"part-{i:05d}.parquet") for i in range(n_parts)], ignore_index=True)
    seg_backend, model_id = metas[0]["backend"], metas[0]["model_id"]
    cache_dir = _cache_dir(cache_root, seg_backend, model_id)
    fresh = parts[parts["fresh"]]
    if cache_dir is not None and len(fresh):
        merged = _read_cache(cache_dir)
        merged.update(zip(fresh["sentence_sha256"], fresh["words"]))
        write_table(pd.DataFrame({"sentence_sha256": list(merged), "words": [list(v) for v in merged.values()]}),
                    cache_dir, name="segment_cache", config={"backend": seg_backend, "model_id": model_id},
                    code_version=code_version(TEXT_PACKAGES))
    out = parts[["doc_id", "sent_idx"]].copy()
    out["words"] = [list(w) for w in parts["words"]]
    n_fresh = int(fresh["sentence_sha256"].nunique())
    stats = {"sentences": int(len(out)), "words": int(sum(map(len, out["words"]))), "backend": seg_backend,
             "model_id": model_id, "chars": int(sum(len("".join(w)) for w in out["words"])),
             "segmented_now": n_fresh, "from_cache": int((~parts["fresh"]).sum()), "parts": n_parts}
    write_table(out, out_dir, name="segments", config={"backend": backend, "user_dict": user_dict,
                                                       "resolved_backend": seg_backend, "model_id": model_id},
                code_version=code_version(TEXT_PACKAGES), inputs={"sentences": manifest_fingerprint(sentences_dir)},
                stats=stats)
    shutil.rmtree(folder, ignore_errors=True)
    return stats


def segment_stage(sentences_dir, out_dir, backend: str = "auto", user_dict: str | None = None,
                  cache_root: str | os.PathLike | None = None, n_parts: int = 1) -> dict:
    """``sentences`` -> ``segments`` (doc_id, sent_idx, words) with the backend recorded, in one process:
    :func:`segment_part` for each of ``n_parts`` parts, then :func:`merge_segments`.

    With ``cache_root``, words are cached per sentence sha256 in a table under
    ``cache_root/<backend model id hash>/``, so a re-run segments only sentences it has not seen.
    """
    for i in range(n_parts):
        segment_part(sentences_dir, out_dir, i, n_parts, backend, user_dict, cache_root)
    return merge_segments(sentences_dir, out_dir, n_parts, backend, user_dict, cache_root)


def _parquet_bytes(df: pd.DataFrame) -> bytes:
    import io

    import pyarrow.parquet as pq

    buf = io.BytesIO()
    pq.write_table(pa.Table.from_pandas(df, preserve_index=False), buf, compression="zstd")
    return buf.getvalue()


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
                code_version=code_version(TEXT_PACKAGES), inputs=inputs, stats=stats,
                extra_files={"vocab.txt": txt})
    return stats


def document_splits(clean_dir, cfg: PairConfig) -> dict[str, str]:
    """doc_id -> train/dev/test for the cleaned corpus (seeded; shared by pairs and pretraining)."""
    ids = read_table(clean_dir, ["doc_id"])["doc_id"].tolist()
    return split_documents(ids, cfg.split_ratios, cfg.seed)


def datasets_stage(sentences_dir, clean_dir, out_root, cfg: PairConfig, rows_per_shard: int = 50_000) -> dict:
    """``sentences`` -> ``policysm1/`` and ``policysm2/`` (split=train/dev/test) + probe results."""
    sents = read_table(sentences_dir, ["doc_id", "sent_idx", "clauses"])
    split_of = document_splits(clean_dir, cfg)
    inputs = {"sentences": manifest_fingerprint(sentences_dir), "documents_clean": manifest_fingerprint(clean_dir)}
    out = {}
    for name in ("policysm1", "policysm2"):
        pairs, stats = build_pairs(sents, split_of, name, cfg)
        stats["probe"] = shortcut_probe(pairs)
        cfg_json = {**asdict(cfg), "dataset": name}
        write_table(pairs, Path(out_root) / name, name=name, config=cfg_json, code_version=code_version(TEXT_PACKAGES),
                    inputs=inputs, stats=stats, rows_per_shard=rows_per_shard, partition_by="split")
        out[name] = stats
    return out
