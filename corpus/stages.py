"""Text stages as storage-to-storage steps: each reads its input tables, writes its output table(s)
with a manifest, and returns a small JSON-able summary (the stage report). Used by ``tasks/``;
usable from a notebook. Never imports prefect.
"""
from __future__ import annotations

import os
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


def segment_stage(sentences_dir, out_dir, backend: str = "auto", user_dict: str | None = None,
                  cache_root: str | os.PathLike | None = None) -> dict:
    """``sentences`` -> ``segments`` (doc_id, sent_idx, words) with the backend recorded.

    With ``cache_root``, words are cached per sentence sha256 in a table under
    ``cache_root/<backend model id hash>/``, so a re-run segments only sentences it has not seen.
    """
    sents = read_table(sentences_dir, ["doc_id", "sent_idx", "text"])
    seg = load_segmenter(backend, user_dict)
    keys = [text_sha256(t) for t in sents["text"]]
    cache_dir = Path(cache_root) / json_sha256([seg.backend, seg.model_id])[:16] if cache_root else None
    cached: dict[str, list] = {}
    if cache_dir is not None and (cache_dir / "manifest.json").is_file():
        c = read_table(cache_dir)
        cached = dict(zip(c["sentence_sha256"], c["words"]))
    todo = sorted({k: t for k, t in zip(keys, sents["text"]) if k not in cached}.items())
    fresh = dict(zip([k for k, _ in todo], seg.segment([t for _, t in todo]))) if todo else {}
    words = [list(cached[k]) if k in cached else fresh[k] for k in keys]
    if cache_dir is not None and fresh:
        merged = {**cached, **fresh}
        write_table(pd.DataFrame({"sentence_sha256": list(merged), "words": [list(v) for v in merged.values()]}),
                    cache_dir, name="segment_cache", config={"backend": seg.backend, "model_id": seg.model_id},
                    code_version=code_version(TEXT_PACKAGES))
    out = pd.DataFrame({"doc_id": sents["doc_id"], "sent_idx": sents["sent_idx"], "words": words})
    stats = {"sentences": int(len(out)), "words": int(sum(map(len, words))), "backend": seg.backend,
             "model_id": seg.model_id, "chars": int(sents["text"].str.len().sum()),
             "segmented_now": len(fresh), "from_cache": int(len(keys) - sum(1 for k in keys if k in fresh))}
    write_table(out, out_dir, name="segments", config={"backend": backend, "user_dict": user_dict,
                                                       "resolved_backend": seg.backend, "model_id": seg.model_id},
                code_version=code_version(TEXT_PACKAGES), inputs={"sentences": manifest_fingerprint(sentences_dir)},
                stats=stats)
    return stats


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
