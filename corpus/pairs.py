"""PolicySM-1 and PolicySM-2 sentence-matching pairs, leak-free (SPEC §5, thesis §3.2.3).

Positive: two adjacent clauses ``(c_k, c_k+1)`` of one sentence. PolicySM-1 adds one negative per
positive: ``reversed_share`` of them the positive reversed, the rest a first clause and a second
clause from two different documents, drawn from the pools of positives' first and second clauses
(so length/position features do not leak). PolicySM-2 adds up to ``sm2_negatives`` negatives per
positive: a non-last clause of sentence i and a non-first clause of sentence i+gap of the same
document, gap in ``gaps`` (thesis: 5 negatives, gaps 2-5); where those sentences allow fewer, the rest
come from the nearest wider gaps of the same document (kind ``wide_gap``), so the dataset keeps the
thesis's 1:5 wherever a document has the sentences for it.

Against the thesis's leaks: every clause gets the same normalisation (end marks stripped),
documents are split into train/dev/test before pairing (pairs never cross splits), a text pair
appears at most once over all splits and never with both labels. Deterministic for a seed.

Streaming (SPEC §1, §5): pairs are made per *pairing group*: the documents of one split in corpus order,
cut into runs of ``group_docs`` documents (group i of a split = its documents i*group_docs ...
(i+1)*group_docs-1), each with its own seed (seed, dataset, split, i); random PolicySM-1 negatives draw
from the pools of their group. Over all groups a text pair is kept once: its first occurrence by
(positive before negative, split train/dev/test, group, position in group), so a negative that is a
positive anywhere is dropped (a conflict), and so are the negatives made for a positive that was dropped
(``orphaned``), as the negatives of the unsharded method were made for kept positives only. Each split's rows are ordered by a seeded hash of the pair
text (:func:`shuffle_key`): a random order that depends only on which pairs there are, so the stage can
resolve duplicates bucket by bucket of that key and write the splits in order, and its output is the
same bytes whatever its shard size.
"""
from __future__ import annotations

import hashlib
from dataclasses import dataclass
from typing import Iterable, Iterator

import numpy as np
import pandas as pd

from storage.bounds import check_bounds, check_order

SPLITS = ("train", "dev", "test")
PAIR_COLUMNS = ("pair_id", "text_a", "text_b", "label", "kind", "gap", "doc_a", "doc_b", "split")
CANDIDATE_COLUMNS = ("text_a", "text_b", "label", "kind", "gap", "doc_a", "doc_b", "split", "prio_split",
                     "group", "row", "src")


@dataclass(frozen=True)
class PairConfig:
    """seed: RNG seed; split_ratios: train/dev/test shares of documents; reversed_share: share of
    PolicySM-1 negatives that are reversed positives; sm2_negatives: negatives per positive in
    PolicySM-2 (thesis: 5); gaps: sentence distances of PolicySM-2 negatives (thesis: 2-5); max_wide_gap:
    the largest distance of the wider-gap negatives that make up a positive's shortfall (sentences; no
    wider gaps when it is <= max(gaps)); min_clause_chars: shorter clauses
    are not paired; max_clause_chars: longer clauses are not paired; group_docs: documents per pairing
    group (random negatives are drawn within a group; changes the pairs); shard_docs: documents read at a
    time by the stage (memory only: the output is the same bytes for any value)."""

    seed: int = 13
    split_ratios: tuple[float, float, float] = (0.8, 0.1, 0.1)
    reversed_share: float = 0.2
    sm2_negatives: int = 5
    gaps: tuple[int, ...] = (2, 3, 4, 5)
    max_wide_gap: int = 50
    min_clause_chars: int = 2
    max_clause_chars: int = 60
    group_docs: int = 64
    shard_docs: int = 256

    def __post_init__(self):
        check_bounds(self, seed=(0, 2 ** 32 - 1), reversed_share=(0, 1), sm2_negatives=(0, 1000),
                     min_clause_chars=(1, None), max_clause_chars=(1, 1_000_000), group_docs=(1, 10_000_000),
                     shard_docs=(1, 10_000_000), max_wide_gap=(0, 1_000_000))
        check_order(self, "min_clause_chars", "max_clause_chars")
        r = self.split_ratios
        if not (isinstance(r, (tuple, list)) and len(r) == 3 and all(isinstance(x, (int, float))
                and not isinstance(x, bool) and 0 <= x <= 1 for x in r) and abs(sum(r) - 1) < 1e-6 and r[0] > 0):
            raise ValueError(f"PairConfig.split_ratios = {r!r}: must be 3 numbers in [0, 1] summing to 1 "
                             "(train share > 0)")
        if not (isinstance(self.gaps, (tuple, list)) and self.gaps and all(
                isinstance(g, int) and not isinstance(g, bool) and 1 <= g <= 1000 for g in self.gaps)):
            raise ValueError(f"PairConfig.gaps = {self.gaps!r}: must be a non-empty list of integers in [1, 1000]")


def _rng(seed: int, *names: str) -> np.random.Generator:
    digest = hashlib.sha256("|".join([str(seed), *names]).encode()).digest()
    return np.random.default_rng(int.from_bytes(digest[:8], "little"))


def pair_id(text_a: str, text_b: str) -> str:
    """Stable id of an ordered text pair: 16 hex chars of sha256(a + US + b)."""
    return hashlib.sha256(f"{text_a}\x1f{text_b}".encode("utf-8")).hexdigest()[:16]


def split_documents(doc_ids: list[str], ratios: tuple[float, float, float], seed: int) -> dict[str, str]:
    """Assign each document to train/dev/test by a seeded shuffle (every split non-empty when >= 3 docs).

    Raises:
        ValueError: ratios do not sum to 1 or one is negative.
    """
    if abs(sum(ratios) - 1) > 1e-6 or min(ratios) < 0:
        raise ValueError(f"split ratios {ratios} must be >= 0 and sum to 1")
    ids = sorted(set(doc_ids))
    order = _rng(seed, "split").permutation(len(ids))
    n = len(ids)
    n_dev = max(int(round(n * ratios[1])), 1 if n >= 3 and ratios[1] > 0 else 0)
    n_test = max(int(round(n * ratios[2])), 1 if n >= 3 and ratios[2] > 0 else 0)
    n_train = n - n_dev - n_test
    out = {}
    for rank, i in enumerate(order):
        out[ids[i]] = "train" if rank < n_train else ("dev" if rank < n_train + n_dev else "test")
    return out


def _usable(c: str, cfg: PairConfig) -> bool:
    return cfg.min_clause_chars <= len(c) <= cfg.max_clause_chars


def _positives(sents: pd.DataFrame, cfg: PairConfig) -> Iterator[tuple[str, int, str, str]]:
    """(doc_id, sentence position in doc, c_k, c_k+1) for adjacent usable clauses."""
    for doc_id, pos, clauses in zip(sents["doc_id"].tolist(), sents["pos"].tolist(), sents["clauses"].tolist()):
        for a, b in zip(clauses[:-1], clauses[1:]):
            if _usable(a, cfg) and _usable(b, cfg):
                yield doc_id, pos, a, b


def _sm1_negatives(pos: list[tuple], cfg: PairConfig, rng: np.random.Generator) -> list[tuple]:
    firsts = [(p[2], p[0]) for p in pos]
    seconds = [(p[3], p[0]) for p in pos]
    out = []
    n_docs = len({p[0] for p in pos})
    for k, (doc, _, a, b) in enumerate(pos):
        if rng.random() < cfg.reversed_share or n_docs < 2:
            out.append((b, a, "reversed", 0, doc, doc, k))
            continue
        for _ in range(20):
            fa, da = firsts[rng.integers(len(firsts))]
            sb, db = seconds[rng.integers(len(seconds))]
            if da != db:
                out.append((fa, sb, "random", None, da, db, k))
                break
    return out


def _draw(fixed: list[str], options: list[tuple[int, list[str]]], need: int, rng: np.random.Generator,
          taken: set, fixed_first: bool = True) -> list[tuple[str, str, int]]:
    """Up to ``need`` distinct pairs ``(text_a, text_b, gap)`` not in ``taken`` (added to it): one clause
    from ``fixed`` and one from one of ``options`` (``(gap, clauses)``), uniformly; the ``fixed`` clause
    is text_a when ``fixed_first``, else text_b. Exhaustive (a seeded permutation of every combination)
    when there are at most 64 combinations, else ``need`` * 8 random draws, so a positive gets ``need``
    negatives whenever its sentences allow."""
    total = len(fixed) * sum(len(s) for _, s in options)
    if not total or need <= 0:
        return []
    if total <= 64:
        combos = [(x, y, g) for g, ys in options for y in ys for x in fixed]
        order = (combos[j] for j in rng.permutation(len(combos)))
    else:
        order = ((fixed[rng.integers(len(fixed))], *_pick(options, rng)) for _ in range(need * 8))
    out = []
    for x, y, g in order:
        if len(out) == need:
            break
        key = (x, y) if fixed_first else (y, x)
        if key not in taken:
            taken.add(key)
            out.append((*key, g))
    return out


def _pick(options: list[tuple[int, list[str]]], rng: np.random.Generator) -> tuple[str, int]:
    g, clauses = options[rng.integers(len(options))]
    return clauses[rng.integers(len(clauses))], g


def _sm2_negatives(sents: pd.DataFrame, pos: list[tuple], cfg: PairConfig, rng: np.random.Generator,
                   taken: set) -> list[tuple]:
    """PolicySM-2 negatives, ``cfg.sm2_negatives`` per positive where the document allows (thesis 1:5),
    each a non-last clause of a sentence j and a non-first clause of sentence j+gap of the same document:
    first j = i, the positive's sentence, gap in ``cfg.gaps`` (kind ``gap<g>``); short of that (near the
    end of a document) j = i-gap, the pair ending in the positive's sentence (the same kind of pair,
    kind ``gap<g>``); then the nearest wider gaps, max(gaps) < gap <= ``cfg.max_wide_gap``, on either
    side (kind ``wide_gap``, its gap recorded)."""
    by_doc: dict[str, dict[int, list[str]]] = {}
    for doc_id, p, clauses in zip(sents["doc_id"].tolist(), sents["pos"].tolist(), sents["clauses"].tolist()):
        by_doc.setdefault(doc_id, {})[p] = list(clauses)
    need = cfg.sm2_negatives
    steps = [(tuple(cfg.gaps), False)] + [((g,), True) for g in range(max(cfg.gaps) + 1, cfg.max_wide_gap + 1)]
    out = []
    for k, (doc, i, _, _) in enumerate(pos):
        doc_sents, made = by_doc[doc], 0
        for gaps, wide in steps:
            if made == need or (i + gaps[0] > max(doc_sents) and i - gaps[0] < 0):
                break
            for forward in (True, False):  # pairs (i, i+g), then (i-g, i)
                drawn = _draw_gap(doc_sents, i, forward, gaps, need - made, rng, taken, cfg)
                made += len(drawn)
                out += [(a, b, "wide_gap" if wide else f"gap{g}", g, doc, doc, k) for a, b, g in drawn]
    return out


def _draw_gap(doc_sents: dict, i: int, forward: bool, gaps: tuple[int, ...], need: int, rng: np.random.Generator,
              taken: set, cfg: PairConfig) -> list[tuple[str, str, int]]:
    """:func:`_draw` over the pairs (a non-last clause of sentence j, a non-first clause of sentence j+g),
    g in ``gaps``, with j = i (``forward``) or j + g = i."""
    def clauses(n: int, first: bool) -> list[str]:
        cs = doc_sents.get(n, [])
        return [c for c in (cs[:-1] if first else cs[1:]) if _usable(c, cfg)]

    if forward:
        return _draw(clauses(i, True), [(g, s) for g in gaps if (s := clauses(i + g, False))], need, rng, taken)
    return _draw(clauses(i, False), [(g, f) for g in gaps if (f := clauses(i - g, True))], need, rng, taken,
                 fixed_first=False)


def shuffle_key(text_a: str, text_b: str, seed: int, dataset: str) -> int:
    """Order key of a pair within its split: the first 8 bytes of sha256(seed, dataset, a, b) as an
    unsigned 64-bit int (a seeded random order that depends only on the pair's texts)."""
    digest = hashlib.sha256(f"{seed}|{dataset}|{text_a}\x1f{text_b}".encode("utf-8")).digest()
    return int.from_bytes(digest[:8], "big")


def pair_groups(frames: Iterable[pd.DataFrame], split_of: dict[str, str], group_docs: int
                ) -> Iterator[tuple[str, int, pd.DataFrame]]:
    """Cut sentences into pairing groups: ``(split, group index, sentences of the group's documents)``.

    Args:
        frames: the ``sentences`` rows (doc_id, sent_idx, clauses) in corpus order, each frame holding
            whole documents (rows of a document contiguous).
        split_of: doc_id -> split; documents without a split are skipped.
        group_docs: documents per group (>= 1).

    Group i of a split holds that split's documents number i*group_docs ... (i+1)*group_docs-1 in corpus
    order, whatever the frames' sizes. Memory: up to ``group_docs`` documents per split.
    """
    if group_docs < 1:
        raise ValueError(f"group_docs must be >= 1, got {group_docs}")
    buf: dict[str, list[pd.DataFrame]] = {s: [] for s in SPLITS}
    ndocs = {s: 0 for s in SPLITS}
    index = {s: 0 for s in SPLITS}
    for frame in frames:
        split = frame["doc_id"].map(split_of)
        for s in SPLITS:
            part = frame[(split == s).to_numpy()]
            if not len(part):
                continue
            buf[s].append(part)
            ndocs[s] += int(part["doc_id"].nunique())
            while ndocs[s] >= group_docs:
                df = pd.concat(buf[s], ignore_index=True)
                ids = df["doc_id"].to_numpy()
                starts = np.concatenate([[0], np.flatnonzero(ids[1:] != ids[:-1]) + 1])
                cut = starts[group_docs] if group_docs < len(starts) else len(df)
                yield s, index[s], df.iloc[:cut].reset_index(drop=True)
                index[s] += 1
                rest = df.iloc[cut:].reset_index(drop=True)
                buf[s], ndocs[s] = ([rest], len(starts) - group_docs) if len(rest) else ([], 0)
    for s in SPLITS:
        if buf[s]:
            yield s, index[s], pd.concat(buf[s], ignore_index=True)


def group_candidates(sents: pd.DataFrame, dataset: str, split: str, group: int, cfg: PairConfig = PairConfig()
                     ) -> tuple[pd.DataFrame, dict]:
    """Candidate pairs of one pairing group (SPEC §5), seeded by (seed, dataset, split, group).

    Args:
        sents: the group's sentences (doc_id, sent_idx, clauses), rows of a document contiguous.

    Returns:
        ``(candidates, dropped)``: columns :data:`CANDIDATE_COLUMNS` (positives first, then negatives, in
        generation order; ``prio_split`` = index of the split, ``row`` = position in the group, ``src`` =
        the row of the positive a negative was made for, a positive's own row), unique within the group;
        ``dropped`` counts the group's duplicates and conflicts.

    Raises:
        ValueError: unknown dataset name.
    """
    if dataset not in ("policysm1", "policysm2"):
        raise ValueError(f"unknown dataset {dataset!r}")
    sents = sents.assign(_doc=pd.factorize(sents["doc_id"])[0]).sort_values(["_doc", "sent_idx"], kind="stable")
    sents = sents.assign(pos=sents.groupby("_doc").cumcount())
    dropped = {"duplicate": 0, "conflict": 0}
    rows, positives = [], set()
    pos = []
    for doc, i, a, b in _positives(sents, cfg):
        if (a, b) in positives:
            dropped["duplicate"] += 1
            continue
        positives.add((a, b))
        pos.append((doc, i, a, b))
        rows.append((a, b, 1, "positive", 0, doc, doc, len(pos) - 1))
    rng = _rng(cfg.seed, dataset, split, str(group))
    negs = (_sm1_negatives(pos, cfg, rng) if dataset == "policysm1"
            else _sm2_negatives(sents, pos, cfg, rng, set(positives)))
    seen = set(positives)
    for a, b, kind, gap, da, db, k in negs:
        if (a, b) in seen:
            dropped["conflict" if (a, b) in positives else "duplicate"] += 1
            continue
        seen.add((a, b))
        rows.append((a, b, 0, kind, gap, da, db, k))
    df = pd.DataFrame(rows, columns=["text_a", "text_b", "label", "kind", "gap", "doc_a", "doc_b", "src"])
    df["src"] = df["src"].astype("int64")
    df["gap"] = df["gap"].astype("Int64")
    df["label"] = df["label"].astype("int64")
    df["split"] = split
    df["prio_split"] = SPLITS.index(split)
    df["group"] = group
    df["row"] = np.arange(len(df), dtype=np.int64)
    return df[list(CANDIDATE_COLUMNS)], dropped


def candidate_keys(cands: pd.DataFrame, seed: int, dataset: str) -> np.ndarray:
    """:func:`shuffle_key` of each candidate row (uint64 array)."""
    return np.fromiter((shuffle_key(a, b, seed, dataset) for a, b in zip(cands["text_a"].tolist(),
                                                                        cands["text_b"].tolist())),
                       dtype=np.uint64, count=len(cands))


def dropped_positives(cands: pd.DataFrame) -> set[tuple[int, int, int]]:
    """(prio_split, group, row) of the positives that lose to an earlier occurrence of their pair (all
    occurrences of a pair must be in ``cands``): the negatives made for them are dropped too
    (:func:`resolve_candidates`), so every dataset keeps its negatives-per-positive ratio."""
    pos = cands[cands["label"] == 1].sort_values(["text_a", "text_b", "prio_split", "group", "row"], kind="stable")
    lost = pos[pos.duplicated(["text_a", "text_b"], keep="first").to_numpy()]
    return set(zip(lost["prio_split"].tolist(), lost["group"].tolist(), lost["row"].tolist()))


def resolve_candidates(cands: pd.DataFrame, keys: np.ndarray, orphans: set | None = None
                       ) -> tuple[pd.DataFrame, dict]:
    """Keep each text pair once over all groups and order the survivors by ``keys`` (then texts).

    The kept occurrence of a pair is its first by (positive before negative, split, group, row); a
    dropped negative whose pair is a positive is a conflict, every other dropped row a duplicate. All
    occurrences of a pair must be in ``cands`` (the stage passes one key bucket at a time). Negatives
    made for a positive in ``orphans`` (:func:`dropped_positives` over all buckets) are dropped first
    and counted as ``orphaned``.

    Returns:
        ``(pairs, dropped)``: pairs with columns :data:`PAIR_COLUMNS` in key order.
    """
    orphaned = np.zeros(len(cands), dtype=bool)
    if orphans:
        src = zip(cands["prio_split"].tolist(), cands["group"].tolist(), cands["src"].tolist())
        orphaned = (cands["label"] == 0).to_numpy() & np.fromiter((k in orphans for k in src), bool, len(cands))
    cands = cands.assign(_key=keys, _neg=(cands["label"] == 0).astype(np.int8))[~orphaned]
    cands = cands.sort_values(["text_a", "text_b", "_neg", "prio_split", "group", "row"], kind="stable")
    dup = cands.duplicated(["text_a", "text_b"], keep="first").to_numpy()
    first_label = cands["label"].where(~dup).ffill().to_numpy()
    lost = cands[dup]
    conflict = int(((lost["label"] == 0).to_numpy() & (first_label[dup] == 1)).sum())
    dropped = {"duplicate": int(dup.sum()) - conflict, "conflict": conflict, "orphaned": int(orphaned.sum())}
    kept = cands[~dup].sort_values(["_key", "text_a", "text_b"], kind="stable")
    kept = kept.assign(pair_id=[pair_id(a, b) for a, b in zip(kept["text_a"].tolist(), kept["text_b"].tolist())])
    return kept[list(PAIR_COLUMNS)].reset_index(drop=True), dropped


def pair_stats(counts: dict, dropped: dict, split_of: dict[str, str], target: int | None = None,
               max_listed: int = 50) -> dict:
    """The dataset manifest's stats from merged counts: ``counts`` maps ("label", split, label),
    ("kind", kind) and ("doc", doc_a, label) to pair counts.

    ``negatives_per_positive`` is the achieved ratio. With ``target`` (PolicySM-2: 5 negatives per
    positive, thesis §3.2.3), ``below_target`` counts the documents whose own pairs fall short of it (too
    few sentences or clauses after their positives) and lists the first ``max_listed`` of them in doc_id
    order as ``{doc_id, positives, negatives}``."""
    per_split = {s: {str(k[2]): v for k, v in sorted(counts.items(), key=lambda kv: -kv[1])
                     if k[0] == "label" and k[1] == s} for s in SPLITS}
    n_pos = sum(v for k, v in counts.items() if k[0] == "label" and k[2] == 1)
    n_neg = sum(v for k, v in counts.items() if k[0] == "label" and k[2] == 0)
    out = {
        "pairs": int(n_pos + n_neg),
        "per_split_label": per_split,
        "per_kind": {k[1]: int(v) for k, v in sorted(counts.items(), key=lambda kv: (-kv[1], kv[0][1])) if k[0] == "kind"},
        "negatives_per_positive": round(n_neg / n_pos, 4) if n_pos else None,
        "dropped": dropped,
        "documents_per_split": {s: sum(1 for v in split_of.values() if v == s) for s in SPLITS},
    }
    if target is not None:
        docs = sorted({k[1] for k in counts if k[0] == "doc"})
        short = [{"doc_id": d, "positives": int(counts.get(("doc", d, 1), 0)),
                  "negatives": int(counts.get(("doc", d, 0), 0))} for d in docs
                 if counts.get(("doc", d, 0), 0) < target * counts.get(("doc", d, 1), 0)]
        out["target_negatives_per_positive"] = target
        out["below_target"] = {"documents": len(short), "of_documents": len(docs), "listed": short[:max_listed]}
    return out


def count_pairs(pairs: pd.DataFrame, counts: dict) -> None:
    """Add ``pairs``' counts per (split, label), per kind and per (first document, label) into ``counts``
    (see :func:`pair_stats`)."""
    for (s, lab), n in pairs.groupby(["split", "label"]).size().items():
        counts[("label", s, int(lab))] = counts.get(("label", s, int(lab)), 0) + int(n)
    for kind, n in pairs["kind"].value_counts().items():
        counts[("kind", str(kind))] = counts.get(("kind", str(kind)), 0) + int(n)
    for (doc, lab), n in pairs.groupby(["doc_a", "label"]).size().items():
        counts[("doc", str(doc), int(lab))] = counts.get(("doc", str(doc), int(lab)), 0) + int(n)


def build_pairs(sentences: pd.DataFrame, split_of: dict[str, str], dataset: str,
                cfg: PairConfig = PairConfig()) -> tuple[pd.DataFrame, dict]:
    """Build one dataset (``"policysm1"`` or ``"policysm2"``) over all splits, in memory (the same rows as
    the streamed ``datasets`` stage writes, see the module docstring).

    Args:
        sentences: the ``sentences`` table (doc_id, sent_idx, clauses), documents in corpus order.
        split_of: doc_id -> split from :func:`split_documents`.

    Returns:
        ``(pairs, stats)``: columns :data:`PAIR_COLUMNS` (label 1 = adjacent, 0 = not), splits in order
        train, dev, test, each in :func:`shuffle_key` order; stats counts pairs per split and label and
        per kind, and the duplicates/conflicts dropped.

    Raises:
        ValueError: unknown dataset name.
    """
    if dataset not in ("policysm1", "policysm2"):
        raise ValueError(f"unknown dataset {dataset!r}")
    order = pd.factorize(sentences["doc_id"])[0]
    sents = sentences.assign(_o=order).sort_values(["_o", "sent_idx"], kind="stable").drop(columns="_o")
    frames, dropped = [], {"duplicate": 0, "conflict": 0, "orphaned": 0}
    for split, g, group in pair_groups([sents], split_of, cfg.group_docs):
        cands, d = group_candidates(group, dataset, split, g, cfg)
        frames.append(cands)
        dropped = {k: dropped[k] + d.get(k, 0) for k in dropped}
    cands = pd.concat(frames, ignore_index=True) if frames else _empty_candidates()
    pairs, d = resolve_candidates(cands, candidate_keys(cands, cfg.seed, dataset), dropped_positives(cands))
    dropped = {k: dropped[k] + d[k] for k in dropped}
    pairs = pd.concat([pairs[pairs["split"] == s] for s in SPLITS], ignore_index=True)
    counts: dict = {}
    count_pairs(pairs, counts)
    return pairs, pair_stats(counts, dropped, split_of, cfg.sm2_negatives if dataset == "policysm2" else None)


def _empty_candidates() -> pd.DataFrame:
    df = pd.DataFrame({c: pd.Series(dtype=object) for c in CANDIDATE_COLUMNS})
    return df.astype({"label": "int64", "gap": "Int64", "prio_split": "int64", "group": "int64", "row": "int64",
                      "src": "int64"})
