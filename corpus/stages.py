"""Text stages as storage-to-storage steps: each reads its input tables, writes its output table(s)
with a manifest, and returns a small JSON-able summary (the stage report). Used by ``tasks/``;
usable from a notebook. Never imports prefect.
"""
from __future__ import annotations

import os
import tempfile
from collections import Counter
from dataclasses import asdict, dataclass, field
from pathlib import Path
from typing import Mapping

import numpy as np
import pandas as pd
import pyarrow as pa
import pyarrow.compute as pc
import pyarrow.parquet as pq

from corpus.clean import CleanConfig, LineCounts, remove_repeated_lines, repeated_line_stats
from corpus.dedup import doc_keys, duplicates_from_keys, place_keys
from corpus.documents import clean_group, clean_stats
from corpus.pairs import (PAIR_COLUMNS, PairConfig, candidate_keys, count_pairs, group_candidates, pair_groups,
                          pair_stats, dropped_positives, resolve_candidates, split_documents)
from corpus.probe import shortcut_probe
from corpus.segment import load_segmenter
from corpus.sentences import SentenceConfig, build_sentences, sentence_counts, sentence_stats
from corpus import shards
from corpus.shards import BucketSpill, iter_doc_groups, iter_rows, spill_dir
from corpus.vocab import VocabConfig, count_words, covered_sentences, load_stopwords, vocab_stats, vocab_table
from crawler.csv_import import METADATA_COLUMNS, read_corpus_csv
from crawler.records_import import ColumnMapping, is_record_file, read_records
from storage.contracts import Stage, folder, table
from storage.mapped import StalePlanError, iter_parts, plan_ranges, verify_parts, write_part_stream
from storage.tables import TableWriter, iter_table
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
    # policy metadata mapped from import columns (crawler.csv_import.METADATA_COLUMNS), read by policy.record
    ("region", pa.string()), ("level", pa.string()), ("effective_date", pa.date32()), ("validity", pa.string()),
])


def import_documents(input_path: str | os.PathLike, out_dir: str | os.PathLike,
                     sources_csv: str | os.PathLike | None = None, rows_per_shard: int = 50_000,
                     columns: Mapping[str, str | None] | None = None) -> dict:
    """A corpus file -> ``documents`` table.

    ``input_path`` is the CSV export (``title,pubtime,channel,describes,contentText``, joined with
    ``sources_csv`` for URLs) or, with a ``.jsonl``/``.jsonl.gz``/``.ndjson``/``.parquet`` suffix, a record
    collection read with ``columns`` (the fields of :class:`crawler.records_import.ColumnMapping`, e.g.
    ``{"id_column": "article_id", "text_column": "text", "title_column": "law_title"}``); its ids are kept as
    ``external_id`` and its rejected records (line, reason) go to the manifest's stats. A CSV export takes only
    the policy metadata fields of ``columns`` (``region_column`` …: :data:`crawler.csv_import.METADATA_MAPPING`).

    Raises:
        crawler.csv_import.InputError: bad input (the message names the file and, where known, the line).
    """
    rejects: list[dict] = []
    if is_record_file(input_path):
        docs, report, rejects = read_records(input_path, ColumnMapping(**(columns or {})))
    else:
        docs, report = read_corpus_csv(input_path, sources_csv, metadata=columns)
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


CLEAN_SCHEMA = DOCUMENTS_SCHEMA.append(pa.field("n_chars", pa.int64())).append(
    pa.field("rules_applied", pa.list_(pa.string())))
# Column types as pandas inference gave them before the stages streamed (large_string), so the bytes stay.
REJECTS_SCHEMA = pa.schema([("doc_id", pa.large_string()), ("reason", pa.large_string()), ("detail", pa.large_string())])
SENTENCES_SCHEMA = pa.schema([("doc_id", pa.large_string()), ("sent_idx", pa.int64()), ("text", pa.large_string()),
                              ("clauses", pa.list_(pa.string()))])
SEGMENTS_SCHEMA = pa.schema([("doc_id", pa.large_string()), ("sent_idx", pa.int64()), ("words", pa.list_(pa.string()))])
CACHE_SCHEMA = pa.schema([("sentence_sha256", pa.large_string()), ("words", pa.list_(pa.string()))])
VOCAB_SCHEMA = pa.schema([("word", pa.large_string()), ("freq", pa.int64()), ("doc_freq", pa.int64())])
PAIRS_SCHEMA = pa.schema([("pair_id", pa.large_string()), ("text_a", pa.large_string()), ("text_b", pa.large_string()),
                          ("label", pa.int64()), ("kind", pa.large_string()), ("gap", pa.int64()), ("doc_a", pa.large_string()),
                          ("doc_b", pa.large_string()), ("split", pa.large_string())])
SEGMENT_CHUNK_ROWS = 20_000
"""Sentences a segmentation part segments and writes at a time (memory only)."""
PROBE_ROWS = 100_000
"""Pairs per split the shortcut probe is fitted and scored on: the first rows of train and test in the
dataset's (random) order, i.e. a uniform sample."""


def clean_stage(documents_dir, out_dir, rejects_dir, cfg: CleanConfig) -> dict:
    """``documents`` -> ``documents_clean`` + ``rejects`` (SPEC §3), ``cfg.shard_docs`` documents at a time.

    Pass 0 counts, per source, the distinct documents each line is found in (:class:`corpus.clean.LineCounts`);
    the lines found in more than ``cfg.repeat_share`` of a source's documents (sources of at least
    ``cfg.repeat_min_docs``) are site chrome (the C4 / CCNet repeated-line rule) and are removed before the
    rules, counted per source in the stats (``repeated_lines``). Pass 1 cleans each group, records its
    per-document rejects and keeps, per surviving document, its exact-duplicate key and MinHash signature
    (corpus.dedup); the cleaned group goes to a spill table. The duplicates are then decided from the keys
    alone (earliest copy kept) and pass 2 copies the spill minus them into ``documents_clean``. Memory: one
    group plus ~0.6 KB of keys per document and 16 bytes per distinct (source, line).
    """
    meta = {"config": asdict(cfg), "code_version": CLEAN.code_version(),
            "inputs": {"documents": manifest_fingerprint(documents_dir)}}
    lines = LineCounts()  # pass 0: documents per (source, line), for the repeated-line rule
    for docs in iter_doc_groups(documents_dir, ["source_id", "source", "text"], cfg.shard_docs,
                                batch_rows=cfg.shard_docs):
        for source, text in zip(_source_keys(docs), docs["text"].fillna("").tolist()):
            lines.add(source, text)
    chrome = lines.chrome(cfg.repeat_share, cfg.repeat_min_docs)
    with spill_dir(out_dir) as tmp:
        acc = _clean_groups(documents_dir, tmp / "clean", chrome, cfg)
        sig = np.concatenate(acc.sigs) if acc.sigs else np.zeros((0, 0), dtype=np.uint32)
        dups = duplicates_from_keys(acc.ids, acc.pub, acc.lens, acc.hashes, sig,
                                    near_threshold=cfg.near_dup_threshold, places=acc.places)
        del sig
        acc.ids = acc.pub = acc.lens = acc.hashes = acc.sigs = acc.places = []  # the keys are no longer needed
        acc.rejects += [(d.doc_id, f"{d.kind}_duplicate", f"duplicate of {d.kept_id}") for d in dups]
        rej = pd.DataFrame(acc.rejects, columns=["doc_id", "reason", "detail"])
        write_table(rej, rejects_dir, name="rejects", stats={"rejects_by_reason": dict(Counter(rej["reason"]))},
                    schema=REJECTS_SCHEMA, **meta)
        drop = pa.array(sorted({d.doc_id for d in dups}), pa.string())
        with TableWriter(out_dir, name="documents_clean", schema=CLEAN_SCHEMA, **meta) as w:
            n_out, chars_out = _copy_without(tmp / "clean", drop, w)
            if acc.removed:
                acc.rule_counts["repeated_lines"] = sum(acc.removed.values())
            w.stats = clean_stats(acc.n_in, n_out, rej["reason"], acc.rule_counts, acc.chars_in, chars_out)
            w.stats["repeated_lines"] = repeated_line_stats(acc.removed, lines.docs)
    return w.stats


@dataclass
class _CleanPass:
    """What pass 1 of :func:`clean_stage` keeps: counts, rejects and the duplicate keys of kept documents."""

    n_in: int = 0
    chars_in: int = 0
    rule_counts: Counter = field(default_factory=Counter)
    removed: Counter = field(default_factory=Counter)
    rejects: list = field(default_factory=list)
    ids: list = field(default_factory=list)
    pub: list = field(default_factory=list)
    lens: list = field(default_factory=list)
    hashes: list = field(default_factory=list)
    sigs: list = field(default_factory=list)
    places: list = field(default_factory=list)


def _clean_groups(documents_dir, spill_path: Path, chrome, cfg: CleanConfig) -> _CleanPass:
    """Pass 1: clean each group of ``documents`` (repeated lines ``chrome`` removed first) into the spill
    table at ``spill_path``; returns the counts, rejects and duplicate keys."""
    acc = _CleanPass()
    with TableWriter(spill_path, name="documents_clean", schema=CLEAN_SCHEMA, rows_per_shard=cfg.shard_docs) as spill:
        for docs in iter_doc_groups(documents_dir, None, cfg.shard_docs, batch_rows=cfg.shard_docs):
            for column in ("external_id", "written_date", *METADATA_COLUMNS):  # absent from crawls and older tables
                if column not in docs:
                    docs[column] = None
            acc.chars_in += int(docs["text"].fillna("").str.len().sum())
            docs["text"] = _without_repeated_lines(docs, chrome, acc.removed)
            kept, rej, counts, _ = clean_group(docs, cfg)
            acc.n_in += len(docs)
            acc.rule_counts.update(counts)
            acc.rejects += rej
            h, sg = doc_keys(kept["text"].tolist(), near=cfg.near_dup_threshold > 0, shingle=cfg.shingle,
                             num_perm=cfg.num_perm)
            acc.ids += kept["doc_id"].tolist()
            acc.pub += kept["pubtime"].tolist()
            acc.lens += kept["n_chars"].tolist()
            acc.hashes += h
            acc.sigs.append(sg)
            acc.places += place_keys(kept["title"].tolist(), kept["region"].tolist())
            spill.write(kept)
    return acc


def _copy_without(spill_path: Path, drop: pa.Array, writer) -> tuple[int, int]:
    """Pass 2: copy the spill table's shards minus the ``drop`` doc ids into ``writer``; (rows, chars) kept."""
    n_out = chars_out = 0
    for shard in read_manifest(spill_path)["shards"]:
        t = pq.read_table(spill_path / shard["path"])
        t = t.filter(pc.invert(pc.is_in(t["doc_id"], value_set=drop)))
        n_out, chars_out = n_out + t.num_rows, chars_out + int(pc.sum(t["n_chars"]).as_py() or 0)
        writer.write(t)
    return n_out, chars_out


def _source_keys(docs: pd.DataFrame) -> list[str]:
    """The source of each document for the repeated-line rule: ``source_id``, else ``source``, else ""."""
    ids = docs["source_id"] if "source_id" in docs else pd.Series([None] * len(docs))
    names = docs["source"] if "source" in docs else pd.Series([None] * len(docs))
    return [str(i) if isinstance(i, str) and i else (str(n) if isinstance(n, str) and n else "")
            for i, n in zip(ids.tolist(), names.tolist())]


def _without_repeated_lines(docs: pd.DataFrame, chrome: set[int], removed: Counter) -> list[str]:
    """The texts of ``docs`` without their sources' repeated lines (:func:`corpus.clean.remove_repeated_lines`);
    each removal counted in ``removed`` by (source, line)."""
    out = []
    for source, text in zip(_source_keys(docs), docs["text"].fillna("").tolist()):
        text, gone = remove_repeated_lines(source, text, chrome)
        removed.update((source, ln) for ln in gone)
        out.append(text)
    return out


def sentences_stage(clean_dir, out_dir, cfg: SentenceConfig) -> dict:
    """``documents_clean`` -> ``sentences`` (SPEC §4), ``cfg.shard_docs`` documents at a time."""
    totals = {"sentences": 0, "clauses": 0, "chars": 0, "documents": 0}
    with TableWriter(out_dir, name="sentences", config=asdict(cfg), code_version=SENTENCES.code_version(),
                     inputs={"documents_clean": manifest_fingerprint(clean_dir)}, schema=SENTENCES_SCHEMA) as w:
        for docs in iter_doc_groups(clean_dir, ["text"], cfg.shard_docs, batch_rows=cfg.shard_docs):
            sents, _ = build_sentences(docs, cfg)
            totals = {k: v + sentence_counts(sents)[k] for k, v in totals.items()}
            w.write(sents)
        w.stats = sentence_stats(totals)
    return w.stats


def _cache_dir(cache_root, backend: str, model_id: str) -> Path | None:
    return Path(cache_root) / json_sha256([backend, model_id])[:16] if cache_root else None


def _cached_words(cache_dir: Path | None, keys: list[str]) -> dict[str, list]:
    """Segmentation cache lookup: sentence sha256 -> words for those of ``keys`` in the cache, read shard
    by shard (only the matching rows' words are decoded)."""
    if cache_dir is None or not (cache_dir / "manifest.json").is_file() or not keys:
        return {}
    wanted = pa.array(sorted(set(keys)), pa.large_string())
    out: dict[str, list] = {}
    for shard in read_manifest(cache_dir)["shards"]:
        path = cache_dir / shard["path"]
        shas = pq.read_table(path, columns=["sentence_sha256"])["sentence_sha256"]
        hit = pc.is_in(shas, value_set=wanted)
        if pc.any(hit).as_py():
            rows = pq.read_table(path).filter(hit)
            out.update(zip(rows["sentence_sha256"].to_pylist(), rows["words"].to_pylist()))
    return out


def segment_plan(sentences_dir, n_parts: int) -> dict:
    """The plan of a partitioned segmentation: ``{"input": sentences fingerprint, "rows": n,
    "ranges": [[lo, hi), ...]}`` (``n_parts`` contiguous row ranges). JSON-able; passed to every part."""
    rows = int(read_manifest(sentences_dir)["rows"])
    return {"input": manifest_fingerprint(sentences_dir), "rows": rows, "ranges": plan_ranges(rows, n_parts)}


def segment_part(sentences_dir, plan: dict, part: int, out_file, backend: str = "auto",
                 user_dict: str | None = None, cache_root: str | os.PathLike | None = None,
                 chunk_rows: int = SEGMENT_CHUNK_ROWS) -> dict:
    """Segment the rows ``plan["ranges"][part]`` of ``sentences`` into the Parquet file ``out_file``
    (doc_id, sent_idx, words, sentence_sha256, fresh), ``chunk_rows`` sentences at a time (one row group
    each); words of sentences in the segmentation cache are reused. Returns the part record (path,
    sha256, rows, fresh, backend, model_id).

    Raises:
        StalePlanError: ``sentences`` changed since the plan was made.
    """
    if manifest_fingerprint(sentences_dir) != plan["input"]:
        raise StalePlanError(f"{sentences_dir} changed since the segmentation plan was made")
    lo, hi = plan["ranges"][part]
    seg = load_segmenter(backend, user_dict)
    cache_dir = _cache_dir(cache_root, seg.backend, seg.model_id)
    n_fresh = 0
    seen: set[str] = set()

    def chunks():
        nonlocal n_fresh
        for sents in iter_rows(sentences_dir, ["doc_id", "sent_idx", "text"], lo, hi, chunk_rows):
            keys = [text_sha256(t) for t in sents["text"]]
            cached = _cached_words(cache_dir, keys)
            todo = sorted({k: t for k, t in zip(keys, sents["text"]) if k not in cached}.items())
            fresh = dict(zip([k for k, _ in todo], seg.segment([t for _, t in todo]))) if todo else {}
            new = [k for k in fresh if k not in seen]
            seen.update(new)
            n_fresh += len(new)
            yield pd.DataFrame({"doc_id": sents["doc_id"].to_numpy(), "sent_idx": sents["sent_idx"].to_numpy(),
                                "words": [list(cached[k]) if k in cached else fresh[k] for k in keys],
                                "sentence_sha256": keys, "fresh": [k in fresh for k in keys]})

    rec = write_part_stream(chunks(), out_file, PART_SCHEMA)
    return {**rec, "part": part, "fresh": n_fresh, "backend": seg.backend, "model_id": seg.model_id}


PART_SCHEMA = pa.schema([("doc_id", pa.string()), ("sent_idx", pa.int64()), ("words", pa.list_(pa.string())),
                         ("sentence_sha256", pa.string()), ("fresh", pa.bool_())])


def merge_segments(sentences_dir, parts: list[dict], out_dir, backend: str = "auto", user_dict: str | None = None,
                   cache_root: str | os.PathLike | None = None) -> dict:
    """Assemble the part files of ``parts`` (records from :func:`segment_part`, in part order) into the
    ``segments`` table and add the newly segmented sentences to the segmentation cache, streaming (one
    row group of a part at a time).

    Raises:
        StalePlanError: a part file is missing or changed, or the parts do not cover ``sentences``.
    """
    verify_parts(parts)
    n_parts = sum(int(p["rows"]) for p in parts)
    if n_parts != int(read_manifest(sentences_dir)["rows"]):
        raise StalePlanError(f"the segmented parts hold {n_parts} rows, {sentences_dir} has more or fewer")
    seg_backend, model_id = parts[0]["backend"], parts[0]["model_id"]
    cache_dir = _cache_dir(cache_root, seg_backend, model_id)
    n_fresh = sum(int(p.get("fresh", 0)) for p in parts)
    if cache_dir is not None and n_fresh:
        _extend_cache(cache_dir, parts, seg_backend, model_id)
    totals = {"sentences": 0, "words": 0, "chars": 0, "from_cache": 0}
    with TableWriter(out_dir, name="segments", config={"backend": backend, "user_dict": user_dict,
                                                       "resolved_backend": seg_backend, "model_id": model_id},
                     code_version=SEGMENT.code_version(), inputs={"sentences": manifest_fingerprint(sentences_dir)},
                     schema=SEGMENTS_SCHEMA) as w:
        for t in iter_parts(parts, ["doc_id", "sent_idx", "words", "fresh"]):
            lengths = pc.list_value_length(t["words"])
            totals["sentences"] += t.num_rows
            totals["words"] += int(pc.sum(lengths).as_py() or 0)
            totals["chars"] += int(pc.sum(pc.utf8_length(pc.list_flatten(t["words"]))).as_py() or 0)
            totals["from_cache"] += t.num_rows - int(pc.sum(t["fresh"]).as_py() or 0)
            w.write(t.select(["doc_id", "sent_idx", "words"]))
        w.stats = {"sentences": totals["sentences"], "words": totals["words"], "backend": seg_backend,
                   "model_id": model_id, "chars": totals["chars"], "segmented_now": n_fresh,
                   "from_cache": totals["from_cache"], "parts": len(parts)}
    return w.stats


def _extend_cache(cache_dir: Path, parts: list[dict], backend: str, model_id: str) -> None:
    """Rewrite the segmentation cache as its old rows followed by the parts' fresh rows (first occurrence of
    each sentence), streaming; memory: the sha256 keys of this run's fresh sentences."""
    old = cache_dir if (cache_dir / "manifest.json").is_file() else None
    with TableWriter(cache_dir, name="segment_cache", config={"backend": backend, "model_id": model_id},
                     code_version=SEGMENT.code_version(), schema=CACHE_SCHEMA) as w:
        if old is not None:
            for shard in read_manifest(old)["shards"]:
                w.write(pq.read_table(old / shard["path"]))
        seen: set[str] = set()
        for t in iter_parts(parts, ["sentence_sha256", "words", "fresh"]):
            t = t.filter(t["fresh"])
            keep = []
            for i, k in enumerate(t["sentence_sha256"].to_pylist()):
                if k not in seen:
                    seen.add(k)
                    keep.append(i)
            w.write(t.take(pa.array(keep, pa.int64())).select(["sentence_sha256", "words"]))


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
    """``segments`` -> ``vocab`` table + ``vocab.txt`` (one word per line, freq order).

    Counts are made per group of ``cfg.shard_docs`` documents and merged (sums; groups share no document,
    so document frequencies add up); a second pass over the segments measures the sentence coverage.
    """
    seg_manifest = read_manifest(segments_dir)
    stop = load_stopwords(stopwords_path)
    freq: Counter = Counter()
    doc_freq: Counter = Counter()
    n = 0
    for g in iter_doc_groups(segments_dir, ["words"], cfg.shard_docs):
        f, d, k = count_words(g["words"], g["doc_id"], stop, cfg)
        freq.update(f)
        doc_freq.update(d)
        n += k
    vocab = vocab_table(freq, doc_freq, cfg)
    candidates = len(freq)
    del freq, doc_freq
    words = set(vocab["word"])
    covered = sum(covered_sentences(t["words"], words) for t in iter_table(segments_dir, ["words"],
                                                                          batch_rows=shards.READ_BATCH_ROWS))
    stats = vocab_stats(vocab, candidates, n, covered)
    stats.update(backend=seg_manifest["stats"].get("backend"), model_id=seg_manifest["stats"].get("model_id"))
    inputs = {"segments": manifest_fingerprint(segments_dir)}
    if stopwords_path:
        inputs["stopwords"] = file_sha256(stopwords_path)
    txt = ("\n".join(vocab["word"]) + "\n").encode("utf-8")
    write_table(vocab, out_dir, name="vocab", config={**asdict(cfg), "stopwords": stopwords_path},
                code_version=VOCAB.code_version(), inputs=inputs, stats=stats,
                extra_files={"vocab.txt": txt}, schema=VOCAB_SCHEMA)
    return stats


def document_splits(clean_dir, cfg: PairConfig) -> dict[str, str]:
    """doc_id -> train/dev/test for the cleaned corpus (seeded; shared by pairs and pretraining)."""
    ids = read_table(clean_dir, ["doc_id"])["doc_id"].tolist()
    return split_documents(ids, cfg.split_ratios, cfg.seed)


DATASET_NAMES = ("policysm1", "policysm2")
BUCKET_PAIRS = 200_000
"""Expected candidate pairs per dedup bucket of the datasets stage (memory only: the output is the same)."""


def datasets_stage(sentences_dir, clean_dir, out_dirs: Mapping[str, str | os.PathLike], cfg: PairConfig,
                   rows_per_shard: int = 50_000) -> dict:
    """``sentences`` -> ``policysm1`` and ``policysm2`` tables (split=train/dev/test) + probe results.

    ``out_dirs`` maps ``"policysm1"`` and ``"policysm2"`` to their table folders. A map-reduce over
    pairing groups (corpus.pairs): the sentences are read ``cfg.shard_docs`` documents at a time and cut
    into groups of ``cfg.group_docs`` documents per split; each group's candidate pairs (both datasets)
    are spilled by range of their shuffle key; each key range is then resolved (a pair kept once, its
    first occurrence) and written in key order. The output is the same bytes for any ``shard_docs``.
    The shortcut probe is fitted on the first :data:`PROBE_ROWS` train pairs and scored on the first
    test pairs (a uniform sample: the order is a seeded hash). Memory: one group, the spill buffer and one
    key range.
    """
    split_of = document_splits(clean_dir, cfg)
    m = read_manifest(sentences_dir)
    inputs = {"sentences": manifest_fingerprint(sentences_dir), "documents_clean": manifest_fingerprint(clean_dir)}
    est = int(m["stats"].get("clauses", m["rows"])) * 6
    n_buckets = max(1, -(-est // BUCKET_PAIRS))
    out = {}
    with spill_dir(out_dirs[DATASET_NAMES[0]]) as tmp:
        spills = {n: BucketSpill(tmp / n, n_buckets) for n in DATASET_NAMES}
        dropped = {n: {"duplicate": 0, "conflict": 0, "orphaned": 0} for n in DATASET_NAMES}
        groups = iter_doc_groups(sentences_dir, ["sent_idx", "clauses"], cfg.shard_docs)
        for split, g, sents in pair_groups(groups, split_of, cfg.group_docs):
            for name in DATASET_NAMES:
                cands, d = group_candidates(sents, name, split, g, cfg)
                keys = candidate_keys(cands, cfg.seed, name)
                spills[name].add(cands.assign(_key=keys), (keys >> np.uint64(32)).astype(np.int64)
                                 * n_buckets >> 32)
                dropped[name] = {k: v + d.get(k, 0) for k, v in dropped[name].items()}
        for name in DATASET_NAMES:
            spills[name].flush()
            out[name] = _write_dataset(name, spills[name], dropped[name], split_of, out_dirs[name], cfg, inputs,
                                       rows_per_shard)
    return out


def _write_dataset(name: str, spill: BucketSpill, dropped: dict, split_of: dict, out_dir, cfg: PairConfig,
                   inputs: dict, rows_per_shard: int) -> dict:
    """Resolve the spilled candidates bucket by bucket (key order) into the dataset table; stats + probe."""
    counts: dict = {}
    sample = {"train": [], "test": []}
    orphans: set = set()
    for b in range(spill.n_buckets):  # pass 1: positives that lose to an earlier copy, in any bucket
        cands = spill.read(b, ["text_a", "text_b", "label", "prio_split", "group", "row"])
        orphans |= dropped_positives(cands) if cands is not None else set()
    with TableWriter(out_dir, name=name, config={**asdict(cfg), "dataset": name},
                     code_version=DATASETS.code_version(), inputs=inputs, rows_per_shard=rows_per_shard,
                     partition_by="split", schema=PAIRS_SCHEMA) as w:
        for b in range(spill.n_buckets):
            cands = spill.read(b)
            if cands is None:
                continue
            pairs, d = resolve_candidates(cands.drop(columns="_key"), cands["_key"].to_numpy(np.uint64), orphans)
            dropped = {k: v + d[k] for k, v in dropped.items()}
            count_pairs(pairs, counts)
            for s in sample:
                have = sum(map(len, sample[s]))
                if have < PROBE_ROWS:
                    sample[s].append(pairs[pairs["split"] == s].iloc[:PROBE_ROWS - have])
            w.write(pairs)
        stats = pair_stats(counts, dropped, split_of, cfg.sm2_negatives if name == "policysm2" else None)
        probe_rows = [f for v in sample.values() for f in v]
        stats["probe"] = shortcut_probe(pd.concat(probe_rows, ignore_index=True) if probe_rows
                                        else pd.DataFrame(columns=list(PAIR_COLUMNS)))
        w.stats = stats
    return stats


# Stage contracts (see storage.contracts): what each text stage reads, writes, runs and is configured by.
IMPORT = Stage("import-documents", "corpus.stages:import_documents", writes=(table("documents"),),
               inputs=("input_path", "sources_csv", "columns"), files=("input_path", "sources_csv"),
               args={"out_dir": "documents"})
CLEAN = Stage("clean", "corpus.stages:clean_stage", reads=("documents",), writes=(table("documents_clean"), table("rejects")),
              config=CleanConfig, settings={"cfg": "clean"},
              args={"documents_dir": "documents", "out_dir": "documents_clean", "rejects_dir": "rejects"})
SENTENCES = Stage("sentences", "corpus.stages:sentences_stage", reads=("documents_clean",), writes=(table("sentences"),),
                  config=SentenceConfig, settings={"cfg": "sentences"},
                  args={"clean_dir": "documents_clean", "out_dir": "sentences"})
# Segmentation mapped over parts (storage.mapped): plan -> parts (one Parquet file each) -> merge.
SEGMENT_PLAN = Stage("segment-plan", "corpus.stages:segment_plan", reads=("sentences",),
                     settings={"n_parts": "segment_parts"}, args={"sentences_dir": "sentences"})
SEGMENT_PART = Stage("segment-part", "corpus.stages:segment_part", reads=("sentences",), settings={"backend": "segmenter"},
                     inputs=("plan", "part"), files=("user_dict",), scratch=("cache/segments",), part_file=".parquet",
                     args={"sentences_dir": "sentences", "out_file": "*part", "cache_root": "cache/segments"})
SEGMENT = Stage("segment", "corpus.stages:merge_segments", reads=("sentences",), writes=(table("segments"),),
                settings={"backend": "segmenter"}, files=("user_dict",), scratch=("cache/segments",),
                takes_parts={"parts": "segment-part"},
                args={"sentences_dir": "sentences", "out_dir": "segments", "cache_root": "cache/segments"})
VOCAB = Stage("vocab", "corpus.stages:vocab_stage", reads=("segments",), writes=(table("vocab"),), config=VocabConfig,
              settings={"cfg": "vocab"}, files=("stopwords",), args={"segments_dir": "segments", "out_dir": "vocab",
                                                                     "stopwords_path": "stopwords"})
DATASETS = Stage("datasets", "corpus.stages:datasets_stage", reads=("sentences", "documents_clean"),
                 writes=(table("policysm1"), table("policysm2")), config=PairConfig, settings={"cfg": "pairs"},
                 args={"sentences_dir": "sentences", "clean_dir": "documents_clean", "out_dirs": "*writes"})
REPORT = Stage("dataset-report", "corpus.report:build_report",
               reads=("documents", "documents_clean", "rejects", "sentences", "vocab", "policysm1", "policysm2"),
               writes=(folder("report"),), args={"tables": "*reads", "out_dir": "report"}, keep=("files", "probe"))
STAGES = (IMPORT, CLEAN, SENTENCES, SEGMENT_PLAN, SEGMENT_PART, SEGMENT, VOCAB, DATASETS, REPORT)
