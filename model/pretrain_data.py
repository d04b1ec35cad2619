"""Pretraining examples per epoch (SPEC §6): NSP pairs with whole-word masking, built per document group.

NSP: for each sentence i of a document that has a next sentence, half the time B is sentence i+1
(label 0, "is next"), else a random sentence of another document of the same split and document group
(label 1); the thesis code made every B random, a trivial task. Whole-word masking: the segmented words of
A and B are the masking units; units are drawn until ``mask_prob`` of the chars are covered, and each chosen
unit is replaced as a whole by ``[MASK]`` (80%), random chars (10%) or kept (10%). Vocabulary words are
matched after masking: a word that overlaps any predicted char is dropped from ``word_ids``/``word_spans``
before the ``max_words`` cap (as ZEN drops the n-grams broken by ``[MASK]``; here also those over kept and
replaced chars), so the word encoder never sees the identity of a masked word.

Positions are the encoder's tokens (:mod:`model.tokens`): one char each for a char stream (unchanged), or a
SentencePiece body's own pieces (SPEC §6, "Tokens of a SentencePiece body"): segmented words and vocabulary
words are found on chars and mapped to the pieces their chars overlap, units sharing a piece are merged, so a
masked word masks every piece it overlaps; ``max_len`` and ``mask_prob`` then count pieces.

Groups (SPEC §1): the documents of each split are hashed into ``ceil(documents / group_docs)`` groups
(:func:`doc_group`: a function of the doc id and the split's document count, never of the shard layout);
each group is generated alone with its own seed ``(seed, epoch, split, group)``, so the build streams:
:func:`spill_groups` sorts the ``sentences``/``segments`` rows into one spill file per group, shard by
shard, and :func:`write_pretrain_epochs` generates the groups one at a time into streaming table writers.
Memory: one input shard (or record batch), one group and the writers' ``rows_per_shard`` buffers. Time:
linear in the sentences (word matching walks vocabulary prefixes, truncation is O(1)). Deterministic per
(seed, epoch); the tables are byte-identical whatever the input shard sizes.

Training reads an epoch through :class:`ShardedExamples`, an indexable view that holds a few output shards
at a time, in the order of :meth:`ShardedExamples.epoch_order` (shards shuffled, then rows shuffled inside
windows of ``window`` shards: a bounded shuffle buffer).
"""
from __future__ import annotations

import contextlib
import hashlib
import math
import os
import shutil
from array import array
from collections import OrderedDict
from dataclasses import dataclass
from pathlib import Path
from typing import Any, Mapping, Sequence

import numpy as np
import pandas as pd
import pyarrow as pa
import pyarrow.parquet as pq

from model.features import CharEncoder, WordMatcher, select_words, to_chars, truncate_pair
from storage.bounds import check_bounds
from storage.tables import TableWriter, iter_table, read_manifest

PRETRAIN_COLUMNS = ("doc_id", "sent_idx", "input_ids", "token_type_ids", "word_ids", "word_spans",
                    "mlm_labels", "nsp_label", "split")
_IDS = pa.list_(pa.int32())
PRETRAIN_SCHEMA = pa.schema([("doc_id", pa.large_string()), ("sent_idx", pa.int64()), ("input_ids", _IDS),
                             ("token_type_ids", _IDS), ("word_ids", _IDS), ("word_spans", pa.list_(_IDS)),
                             ("mlm_labels", _IDS), ("nsp_label", pa.int64()), ("split", pa.large_string())])
"""Columns of ``pretrain/epoch=N`` (``split`` is the hive partition): ids as int32 lists, spans [start, len]."""
_SPILL_SCHEMAS = {
    "sentences": pa.schema([("doc_id", pa.large_string()), ("sent_idx", pa.int64()), ("text", pa.large_string())]),
    "segments": pa.schema([("doc_id", pa.large_string()), ("sent_idx", pa.int64()), ("words", pa.list_(pa.string()))]),
}
_VIEW_COLUMNS = ("input_ids", "token_type_ids", "word_ids", "word_spans", "mlm_labels", "nsp_label")
READ_BATCH_ROWS = 20_000
"""Rows per record batch when the inputs are read (bounds memory whatever their shard size)."""


@dataclass(frozen=True)
class PretrainDataConfig:
    """max_len: chars incl. [CLS]/[SEP] (128); max_words: word matches kept (40); mask_prob: share
    of chars masked (0.15); random_next_prob: share of NSP pairs whose B is random (0.5); seed;
    group_docs: documents per generation group of a split (128; random B sentences come from the same
    group); rows_per_shard: examples per output Parquet shard (10,000; also the unit the trainer loads).

    Raises:
        ValueError: a field out of its range (message: the field and the range; ``storage.bounds``).
    """

    max_len: int = 128
    max_words: int = 40
    mask_prob: float = 0.15
    random_next_prob: float = 0.5
    seed: int = 13
    group_docs: int = 128
    rows_per_shard: int = 10_000

    def __post_init__(self):
        check_bounds(self, max_len=(8, 8192), max_words=(0, 8192), mask_prob=(">", 0, 1), random_next_prob=(0, 1),
                     seed=(0, 2 ** 32 - 1), group_docs=(1, 10_000_000), rows_per_shard=(1, 100_000_000))


def _rng(seed: int, *parts) -> np.random.Generator:
    d = hashlib.sha256("|".join(map(str, (seed, *parts))).encode()).digest()
    return np.random.default_rng(int.from_bytes(d[:8], "little"))


def group_counts(split_of: Mapping[str, str], group_docs: int) -> dict[str, int]:
    """Groups per split: ``ceil(documents of the split / group_docs)``."""
    counts: dict[str, int] = {}
    for split in split_of.values():
        counts[split] = counts.get(split, 0) + 1
    return {s: math.ceil(n / group_docs) for s, n in sorted(counts.items())}


def doc_group(doc_id: str, n_groups: int) -> int:
    """The group of a document among ``n_groups``: blake2b-64 of its id modulo ``n_groups``."""
    h = hashlib.blake2b(str(doc_id).encode("utf-8"), digest_size=8).digest()
    return int.from_bytes(h, "little") % n_groups


def _units(words, offset: int, limit: int) -> list[tuple[int, int]]:
    """(start, length) spans of segmented words, shifted by offset, inside the first ``limit`` chars."""
    out, pos = [], 0
    for w in words:
        if pos >= limit:  # no later word fits (empty words are never units)
            break
        n = len("".join(w.split()))
        if n and pos + n <= limit:
            out.append((pos + offset, n))
        pos += n
    return out


def whole_word_mask(ids: list[int], units: list[tuple[int, int]], enc: CharEncoder, mask_prob: float,
                    rng: np.random.Generator) -> tuple[list[int], list[int]]:
    """Mask whole units until ``mask_prob`` of the unit chars are covered (80/10/10).

    Returns ``(masked ids, labels)`` with label -100 where a char is not predicted.
    """
    n_chars = sum(ln for _, ln in units)
    budget = max(1, int(round(n_chars * mask_prob))) if n_chars else 0
    ids, labels = list(ids), [-100] * len(ids)
    covered = 0
    for k in rng.permutation(len(units)):
        start, ln = units[k]
        if covered + ln > budget:
            continue
        covered += ln
        r = rng.random()
        labels[start:start + ln] = ids[start:start + ln]
        if r < 0.8:
            ids[start:start + ln] = [enc.mask] * ln
        elif r < 0.9:
            ids[start:start + ln] = enc.random_ids(ln, rng).tolist()
        if covered >= budget:
            break
    return ids, labels


def _head_chars(text: str, m: int) -> list[str]:
    """The first ``m`` char tokens of ``text`` (:func:`to_chars`): all that longest-first truncation
    to ``m`` tokens can keep of one side, so a long sentence costs no more than a short one."""
    if len(text) > 2 * m:
        head = to_chars(text[:2 * m])
        if len(head) >= m:
            return head[:m]
    return to_chars(text)[:m]


class _Columns:
    """Flat int32 buffers of the example list columns (4 bytes a value), turned into one Arrow table."""

    def __init__(self):
        self.flat = {c: array("i") for c in ("input_ids", "token_type_ids", "word_ids", "word_spans", "mlm_labels")}
        self.offsets = {c: array("q", [0]) for c in self.flat}
        self.doc_id: list[str] = []
        self.sent_idx, self.nsp = array("q"), array("q")

    def add(self, doc_id, sent_idx, ids, tt, word_ids, spans, labels, nsp_label) -> None:
        for c, vals in (("input_ids", ids), ("token_type_ids", tt), ("word_ids", word_ids), ("mlm_labels", labels)):
            self.flat[c].extend(vals)
            self.offsets[c].append(len(self.flat[c]))
        for s, ln in spans:
            self.flat["word_spans"].extend((s, ln))
        self.offsets["word_spans"].append(len(self.flat["word_spans"]) // 2)
        self.doc_id.append(doc_id)
        self.sent_idx.append(sent_idx)
        self.nsp.append(nsp_label)

    def table(self, split: str) -> pa.Table:
        def lst(c):
            return pa.ListArray.from_arrays(pa.array(np.frombuffer(self.offsets[c], dtype=np.int64).astype(np.int32)),
                                            pa.array(np.frombuffer(self.flat[c], dtype=np.int32)))

        n_spans = len(self.flat["word_spans"]) // 2
        inner = pa.ListArray.from_arrays(pa.array(np.arange(0, 2 * n_spans + 1, 2, dtype=np.int32)),
                                         pa.array(np.frombuffer(self.flat["word_spans"], dtype=np.int32)))
        spans = pa.ListArray.from_arrays(pa.array(np.frombuffer(self.offsets["word_spans"], dtype=np.int64)
                                                  .astype(np.int32)), inner)
        n = len(self.doc_id)
        cols = {"doc_id": pa.array(self.doc_id, pa.large_string()),
                "sent_idx": pa.array(np.frombuffer(self.sent_idx, dtype=np.int64)),
                "input_ids": lst("input_ids"), "token_type_ids": lst("token_type_ids"), "word_ids": lst("word_ids"),
                "word_spans": spans, "mlm_labels": lst("mlm_labels"),
                "nsp_label": pa.array(np.frombuffer(self.nsp, dtype=np.int64)),
                "split": pa.array([split] * n, pa.large_string())}
        return pa.table(cols, schema=PRETRAIN_SCHEMA)


def _sentence(text: str, words, m: int, matcher: WordMatcher, enc=None) -> tuple[list[int], list, list]:
    """What a sentence brings to any pair it is part of: the ids of its first ``m`` tokens, its segmented-word
    units ``(pos, len)`` inside them and its vocabulary matches ``(start, len, word_id)`` there, in token
    positions (computed once; a pair keeps those inside the truncated side, shifted to the side's offset).
    One char per token unless ``enc`` is a pieces stream (:func:`_piece_sentence`)."""
    if getattr(enc, "kind", "chars") == "pieces":
        return _piece_sentence(text, words, m, matcher, enc)
    chars = _head_chars(text, m)
    return enc.ids(chars) if enc is not None else chars, _units(words, 0, len(chars)), matcher.match(chars)


def _piece_sentence(text: str, words, m: int, matcher: WordMatcher, enc) -> tuple[list[int], list, list]:
    """:func:`_sentence` on a SentencePiece body's own pieces (SPEC §6, "Tokens of a SentencePiece body"):
    units and words are found on chars and mapped to the tokens their char spans overlap; units that share a
    token are merged into one masking unit, so masking a word masks every token it overlaps."""
    toks = enc.tokens(text if len(text) <= 16 * m else text[:16 * m]).head(m)
    units = toks.word_tokens(_units(words, 0, len(toks.chars)), m)
    return list(toks.ids), merge_units(units), toks.word_tokens(matcher.match(toks.chars), m)


def merge_units(units: Sequence[tuple[int, int]]) -> list[tuple[int, int]]:
    """``(start, len)`` token ranges in start order, those that overlap merged into one range."""
    out: list[tuple[int, int]] = []
    for s, ln in units:
        if out and s < out[-1][0] + out[-1][1]:
            ps, pl = out[-1]
            out[-1] = (ps, max(ps + pl, s + ln) - ps)
        else:
            out.append((s, ln))
    return out


def _inside(spans, offset: int, limit: int) -> list[tuple]:
    """Spans ``(start, len, ...)`` that end within ``limit``, shifted by ``offset``."""
    return [(s + offset, ln, *rest) for s, ln, *rest in spans if s + ln <= limit]


def _pair(sa: tuple, sb: tuple, enc: CharEncoder, cfg: PretrainDataConfig, rng: np.random.Generator) -> tuple:
    """One masked example from two :func:`_sentence` tuples: ``(ids, token_type_ids, word_ids, spans, labels)``."""
    a, b = truncate_pair(sa[0], sb[0], cfg.max_len - 3)
    ids = [enc.cls] + a + [enc.sep] + b + [enc.sep]
    tt = [0] * (len(a) + 2) + [1] * (len(b) + 1)
    units = _inside(sa[1], 1, len(a)) + _inside(sb[1], len(a) + 2, len(b))
    ids, labels = whole_word_mask(ids, units, enc, cfg.mask_prob, rng)
    # words are matched after masking: any word over a predicted position is dropped (no leak)
    word_ids, spans = select_words(_inside(sa[2], 1, len(a)) + _inside(sb[2], len(a) + 2, len(b)), cfg.max_words,
                                   rng, labels)
    return ids, tt, word_ids, spans, labels


def build_group(part: pd.DataFrame, split: str, enc: CharEncoder, matcher: WordMatcher, cfg: PretrainDataConfig,
                rngs: Sequence[np.random.Generator]) -> list[tuple[pa.Table, dict]]:
    """The examples of one document group, for several epochs at once (one generator each; epoch e's
    examples depend on ``rngs[e]`` alone, so they equal a build of that epoch by itself).

    Args:
        part: doc_id, sent_idx, text, words of the group's sentences, sorted by (doc_id, sent_idx).
        split: the split of all its documents; rngs: the group's generator per epoch (:func:`_rng`).

    Returns:
        Per generator ``(table, counts)``: :data:`PRETRAIN_SCHEMA` rows, one per sentence that has a next
        sentence in its document; counts: examples, random_next, masked, tokens.
    """
    texts, words = part["text"].tolist(), part["words"].tolist()
    docs, idxs = part["doc_id"].tolist(), part["sent_idx"].tolist()
    n, m = len(texts), cfg.max_len - 3
    starts = [k for k in range(n) if k == 0 or docs[k] != docs[k - 1]] + [n]
    outs = [(_Columns(), dict.fromkeys(("examples", "random_next", "masked", "tokens"), 0)) for _ in rngs]
    multi_doc = len(starts) > 2
    for lo, hi in zip(starts[:-1], starts[1:]):
        nxt = _sentence(texts[lo], words[lo], m, matcher, enc) if hi - lo > 1 else None
        for i in range(lo, hi - 1):
            sa, nxt = nxt, _sentence(texts[i + 1], words[i + 1], m, matcher, enc)
            for rng, (cols, cnt) in zip(rngs, outs):
                label, sb = 0, nxt
                if multi_doc and rng.random() < cfg.random_next_prob:
                    c = int(rng.integers(n - (hi - lo)))  # a sentence of another document: skip this one's rows
                    j, label = (c if c < lo else c + hi - lo), 1
                    sb = _sentence(texts[j], words[j], m, matcher, enc)
                ids, tt, word_ids, spans, labels = _pair(sa, sb, enc, cfg, rng)
                cols.add(docs[i], idxs[i], ids, tt, word_ids, spans, labels, label)
                cnt["examples"] += 1
                cnt["random_next"] += label
                cnt["masked"] += len(ids) - labels.count(-100)
                cnt["tokens"] += len(ids)
    return [(cols.table(split), cnt) for cols, cnt in outs]


class _Stats:
    """Epoch statistics summed over groups (the ``stats`` of an epoch table's manifest)."""

    def __init__(self, epoch: int):
        self.epoch, self.per_split, self.random_next, self.masked, self.tokens = epoch, {}, 0, 0, 0

    def add(self, split: str, counts: dict) -> None:
        if counts["examples"]:
            self.per_split[split] = self.per_split.get(split, 0) + counts["examples"]
        self.random_next += counts["random_next"]
        self.masked += counts["masked"]
        self.tokens += counts["tokens"]

    def as_dict(self) -> dict:
        n = sum(self.per_split.values())
        return {"epoch": self.epoch, "examples": n,
                "per_split": dict(sorted(self.per_split.items(), key=lambda kv: -kv[1])),
                "random_next_share": self.random_next / n if n else 0.0,
                "masked_share": self.masked / self.tokens if self.tokens else 0.0}


def _group_keys(split_of: Mapping[str, str], group_docs: int) -> list[tuple[str, int]]:
    return [(s, g) for s, k in group_counts(split_of, group_docs).items() for g in range(k)]


def _group_frames(sentences: pd.DataFrame, segments: pd.DataFrame) -> pd.DataFrame:
    """Sentences joined with their words, sorted by (doc_id, sent_idx)."""
    df = sentences[["doc_id", "sent_idx", "text"]].merge(segments[["doc_id", "sent_idx", "words"]],
                                                         on=["doc_id", "sent_idx"], how="inner")
    return df.sort_values(["doc_id", "sent_idx"], kind="stable").reset_index(drop=True)


def _bucket_of(split_of: Mapping[str, str], group_docs: int, where: str):
    n_groups = group_counts(split_of, group_docs)
    memo: dict[str, tuple[str, int]] = {}

    def key(doc_id: str) -> tuple[str, int]:
        if doc_id not in memo:
            if doc_id not in split_of:
                raise ValueError(f"document {doc_id!r} of {where} has no split (the sentences and the "
                                 f"documents the splits were drawn from disagree: rerun the text stages)")
            split = split_of[doc_id]
            memo[doc_id] = (split, doc_group(doc_id, n_groups[split]))
        return memo[doc_id]

    return key


def build_pretrain_epoch(sentences: pd.DataFrame, segments: pd.DataFrame, split_of: dict[str, str],
                         enc: CharEncoder, matcher: WordMatcher, cfg: PretrainDataConfig, epoch: int
                         ) -> tuple[pd.DataFrame, dict]:
    """One epoch of pretraining examples, in memory (the rows :func:`write_pretrain_epochs` writes, in
    the same order: split, group, doc_id, sent_idx).

    Args:
        sentences: doc_id, sent_idx, text; segments: doc_id, sent_idx, words (same sentences).
        split_of: doc_id -> train/dev/test (random B sentences stay inside the split and group).

    Returns:
        ``(examples, stats)``: columns :data:`PRETRAIN_COLUMNS` (list columns as int32 arrays); stats counts
        examples per split, the share of random-next pairs and of masked chars.

    Raises:
        ValueError: a document with no split in ``split_of``.
    """
    df = _group_frames(sentences, segments)
    key = _bucket_of(split_of, cfg.group_docs, "sentences")
    parts = {k: p for k, p in df.groupby(df["doc_id"].map(key), sort=False)} if len(df) else {}
    stats, tables = _Stats(epoch), []
    for split, group in _group_keys(split_of, cfg.group_docs):
        part = parts.get((split, group))
        if part is not None:
            [(table, counts)] = build_group(part, split, enc, matcher, cfg, [_rng(cfg.seed, epoch, split, group)])
            tables.append(table)
            stats.add(split, counts)
    out = pa.concat_tables(tables) if tables else PRETRAIN_SCHEMA.empty_table()
    return out.to_pandas(), stats.as_dict()


def spill_groups(sentences_dir, segments_dir, split_of: Mapping[str, str], cfg: PretrainDataConfig,
                 spill: Path) -> list[tuple[str, int]]:
    """Sort the rows of the ``sentences`` and ``segments`` tables into one Arrow IPC file per (split, group)
    under ``spill`` (``sentences-<split>-<group>.arrow``, ``segments-...``), reading record batches of
    :data:`READ_BATCH_ROWS` rows. Returns the (split, group) keys in generation order.

    Raises:
        ValueError: a document with no split; storage.TableError: a table is missing.
    """
    key = _bucket_of(split_of, cfg.group_docs, str(sentences_dir))
    for name, src in (("sentences", sentences_dir), ("segments", segments_dir)):
        schema = _SPILL_SCHEMAS[name]
        with contextlib.ExitStack() as stack:
            writers: dict[tuple[str, int], Any] = {}
            for df in iter_table(src, schema.names, batch_rows=READ_BATCH_ROWS):
                if not len(df):
                    continue
                for k, part in df.groupby(df["doc_id"].map(key), sort=False):
                    if k not in writers:
                        sink = stack.enter_context(pa.OSFile(str(_spill_file(spill, name, k)), "wb"))
                        writers[k] = stack.enter_context(pa.ipc.new_stream(sink, schema))
                    writers[k].write_table(pa.Table.from_pandas(part[schema.names], schema=schema, preserve_index=False))
    return _group_keys(split_of, cfg.group_docs)


def _spill_file(spill: Path, name: str, key: tuple[str, int]) -> Path:
    return spill / f"{name}-{key[0]}-{key[1]:06d}.arrow"


def _read_spill(spill: Path, name: str, key: tuple[str, int]) -> pd.DataFrame:
    path = _spill_file(spill, name, key)
    if not path.is_file():
        return _SPILL_SCHEMAS[name].empty_table().to_pandas()
    with pa.OSFile(str(path), "rb") as f:
        return pa.ipc.open_stream(f).read_all().to_pandas()


def write_pretrain_epochs(sentences_dir, segments_dir, split_of: Mapping[str, str], enc: CharEncoder,
                          matcher: WordMatcher, cfg: PretrainDataConfig, epochs: int, out_root: Path,
                          **manifest: Any) -> dict:
    """Write ``out_root/epoch=N`` (N < ``epochs``) tables partitioned by split, streaming: the inputs are
    spilled by group (:func:`spill_groups`, under ``out_root/.spill``, removed at the end), then each group
    is loaded once and its examples for every epoch (:func:`build_group`) go to that epoch's :class:`storage.tables.TableWriter`.

    Args:
        manifest: ``config``, ``code_version``, ``inputs`` for each epoch table's manifest (the epoch is
            added to the config).

    Returns:
        ``{"epoch=N": stats}`` as :func:`build_pretrain_epoch` reports them.

    Raises:
        ValueError: ``epochs`` < 1 or a document with no split; storage.TableError: a missing input table.
    """
    if epochs < 1:
        raise ValueError(f"epochs must be >= 1, got {epochs}")
    spill = Path(out_root) / ".spill"
    spill.mkdir(parents=True)
    try:
        keys = spill_groups(sentences_dir, segments_dir, split_of, cfg, spill)
        stats = [_Stats(e) for e in range(epochs)]
        with contextlib.ExitStack() as stack:
            writers = [stack.enter_context(TableWriter(
                Path(out_root) / f"epoch={e}", name="pretrain", config={**manifest.get("config", {}), "epoch": e},
                code_version=manifest.get("code_version", ""), inputs=manifest.get("inputs"),
                rows_per_shard=cfg.rows_per_shard, partition_by="split", schema=PRETRAIN_SCHEMA))
                for e in range(epochs)]
            for split, group in keys:
                part = _group_frames(_read_spill(spill, "sentences", (split, group)),
                                     _read_spill(spill, "segments", (split, group)))
                if not len(part):
                    continue
                rngs = [_rng(cfg.seed, e, split, group) for e in range(epochs)]
                for e, (table, counts) in enumerate(build_group(part, split, enc, matcher, cfg, rngs)):
                    writers[e].write(table)
                    stats[e].add(split, counts)
            for w, s in zip(writers, stats):
                w.stats = s.as_dict()
    finally:
        shutil.rmtree(spill, ignore_errors=True)
    return {f"epoch={s.epoch}": s.as_dict() for s in stats}


class ShardedExamples:
    """An indexable, picklable view of a pretraining table's rows (``epoch=N`` with a split filter) that
    holds at most ``cache_shards`` Parquet shards in memory (flat int32 arrays), loading them on demand.

    ``view[i]`` is the example dict of row ``i`` (rows in manifest shard order): input_ids, token_type_ids,
    word_ids, mlm_labels (int32 arrays), word_spans ((n, 2) int32), nsp_label (int); views into the cached
    shard. :meth:`epoch_order` gives a row order whose windows of ``cache_shards`` shards fit the cache.

    Args:
        table_dir: the table folder; splits: partition values of ``split`` to keep (None: all);
        cache_shards: shards held at once (>= 1), also the shuffle window of :meth:`epoch_order`.

    Raises:
        storage.TableError: no manifest; ValueError: ``cache_shards`` < 1.
    """

    def __init__(self, table_dir: str | os.PathLike, splits: Sequence[str] | None = None, cache_shards: int = 4):
        if cache_shards < 1:
            raise ValueError("cache_shards must be >= 1")
        self.table_dir, self.cache_shards = Path(table_dir), cache_shards
        self.shards = [s for s in read_manifest(self.table_dir)["shards"]
                       if splits is None or (s.get("partition") or {}).get("split") in splits]
        self.offsets = np.concatenate([[0], np.cumsum([s["rows"] for s in self.shards], dtype=np.int64)])
        self._cache: OrderedDict[int, dict] = OrderedDict()
        self.loads = 0  # shard reads so far (a pass in epoch_order reads each shard once)

    def __len__(self) -> int:
        return int(self.offsets[-1])

    def __getstate__(self) -> dict:
        return {**self.__dict__, "_cache": OrderedDict()}  # workers load their own shards

    def _shard(self, k: int) -> dict:
        if k in self._cache:
            self._cache.move_to_end(k)
            return self._cache[k]
        t = pq.read_table(self.table_dir / self.shards[k]["path"], columns=list(_VIEW_COLUMNS)).combine_chunks()
        cols = {}
        for c in ("input_ids", "token_type_ids", "word_ids", "mlm_labels"):
            arr = t.column(c).chunk(0) if t.num_rows else pa.array([], _IDS)
            cols[c] = (arr.offsets.to_numpy(), arr.values.to_numpy(zero_copy_only=False))
        spans = t.column("word_spans").chunk(0) if t.num_rows else pa.array([], pa.list_(_IDS))
        inner = spans.values
        cols["word_spans"] = (spans.offsets.to_numpy(), inner.offsets.to_numpy(),
                              inner.values.to_numpy(zero_copy_only=False))
        cols["nsp_label"] = t.column("nsp_label").to_numpy()
        self._cache[k] = cols
        self.loads += 1
        while len(self._cache) > self.cache_shards:
            self._cache.popitem(last=False)
        return cols

    def __getitem__(self, i: int) -> dict:
        i = int(i)
        if not 0 <= i < len(self):
            raise IndexError(f"row {i} of {len(self)}")
        k = int(np.searchsorted(self.offsets, i, side="right")) - 1
        r, cols = i - int(self.offsets[k]), self._shard(k)
        ex = {c: cols[c][1][cols[c][0][r]:cols[c][0][r + 1]]
              for c in ("input_ids", "token_type_ids", "word_ids", "mlm_labels")}
        so, io, vals = cols["word_spans"]
        ex["word_spans"] = vals[io[so[r]]:io[so[r + 1]]].reshape(-1, 2)
        ex["nsp_label"] = int(cols["nsp_label"][r])
        return ex

    def epoch_order(self, seed: int, epoch: int) -> np.ndarray:
        """Row order of an epoch (int64, a permutation of ``range(len(self))``), deterministic per
        (seed, epoch): the shards in a seeded random order, and the rows of each run of ``cache_shards``
        consecutive shards of that order shuffled together (a shuffle buffer of that many shards)."""
        rng = np.random.default_rng([seed, epoch, 0x5EED])
        perm = rng.permutation(len(self.shards))
        parts = []
        for w in range(0, len(perm), self.cache_shards):
            idx = np.concatenate([np.arange(self.offsets[k], self.offsets[k + 1]) for k in perm[w:w + self.cache_shards]])
            parts.append(rng.permutation(idx))
        return np.concatenate(parts).astype(np.int64) if parts else np.zeros(0, dtype=np.int64)

    def rows(self, indices: Sequence[int]) -> list[dict]:
        """Example dicts of ``indices`` (any order), each shard loaded once; arrays copied (no shard kept)."""
        got = {}
        for i in sorted(set(int(i) for i in indices)):
            got[i] = {k: (v.copy() if isinstance(v, np.ndarray) else v) for k, v in self[i].items()}
        return [got[int(i)] for i in indices]

