"""PolicySM-1 and PolicySM-2 sentence-matching pairs, leak-free (SPEC §5, thesis §3.2.3).

Positive: two adjacent clauses ``(c_k, c_k+1)`` of one sentence. PolicySM-1 adds one negative per
positive: ``reversed_share`` of them the positive reversed, the rest a first clause and a second
clause from two different documents, drawn from the pools of positives' first and second clauses
(so length/position features do not leak). PolicySM-2 adds up to ``sm2_negatives`` negatives per
positive: a non-last clause of sentence i and a non-first clause of sentence i+gap of the same
document, gap in ``gaps``.

Against the thesis's leaks: every clause gets the same normalisation (end marks stripped),
documents are split into train/dev/test before pairing (pairs never cross splits), a text pair
appears at most once over all splits and never with both labels. Deterministic for a seed.
"""
from __future__ import annotations

import hashlib
from dataclasses import dataclass
from typing import Iterator

import numpy as np
import pandas as pd

SPLITS = ("train", "dev", "test")
PAIR_COLUMNS = ("pair_id", "text_a", "text_b", "label", "kind", "gap", "doc_a", "doc_b", "split")


@dataclass(frozen=True)
class PairConfig:
    """seed: RNG seed; split_ratios: train/dev/test shares of documents; reversed_share: share of
    PolicySM-1 negatives that are reversed positives; sm2_negatives: negatives per positive in
    PolicySM-2; gaps: sentence distances of PolicySM-2 negatives; min_clause_chars: shorter clauses
    are not paired; max_clause_chars: longer clauses are not paired."""

    seed: int = 13
    split_ratios: tuple[float, float, float] = (0.8, 0.1, 0.1)
    reversed_share: float = 0.2
    sm2_negatives: int = 5
    gaps: tuple[int, ...] = (2, 3, 4, 5)
    min_clause_chars: int = 2
    max_clause_chars: int = 60


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
    for doc_id, pos, clauses in zip(sents["doc_id"], sents["pos"], sents["clauses"]):
        for a, b in zip(clauses[:-1], clauses[1:]):
            if _usable(a, cfg) and _usable(b, cfg):
                yield doc_id, pos, a, b


def _sm1_negatives(pos: list[tuple], cfg: PairConfig, rng: np.random.Generator) -> list[tuple]:
    firsts = [(p[2], p[0]) for p in pos]
    seconds = [(p[3], p[0]) for p in pos]
    out = []
    n_docs = len({p[0] for p in pos})
    for doc, _, a, b in pos:
        if rng.random() < cfg.reversed_share or n_docs < 2:
            out.append((b, a, "reversed", 0, doc, doc))
            continue
        for _ in range(20):
            fa, da = firsts[rng.integers(len(firsts))]
            sb, db = seconds[rng.integers(len(seconds))]
            if da != db:
                out.append((fa, sb, "random", None, da, db))
                break
    return out


def _sm2_negatives(sents: pd.DataFrame, pos: list[tuple], cfg: PairConfig, rng: np.random.Generator,
                   taken: set) -> list[tuple]:
    by_doc: dict[str, dict[int, list[str]]] = {}
    for doc_id, p, clauses in zip(sents["doc_id"], sents["pos"], sents["clauses"]):
        by_doc.setdefault(doc_id, {})[p] = clauses
    out = []
    for doc, i, _, _ in pos:
        doc_sents = by_doc[doc]
        firsts = [c for c in doc_sents[i][:-1] if _usable(c, cfg)]
        options = []
        for g in cfg.gaps:
            later = doc_sents.get(i + g, [])
            seconds = [c for c in later[1:] if _usable(c, cfg)]
            if seconds:
                options.append((g, seconds))
        if not options or not firsts:
            continue
        made = 0
        for _ in range(cfg.sm2_negatives * 4):
            if made == cfg.sm2_negatives:
                break
            g, seconds = options[rng.integers(len(options))]
            key = (firsts[rng.integers(len(firsts))], seconds[rng.integers(len(seconds))])
            if key not in taken:
                taken.add(key)
                made += 1
                out.append((key[0], key[1], f"gap{g}", g, doc, doc))
    return out


def build_pairs(sentences: pd.DataFrame, split_of: dict[str, str], dataset: str,
                cfg: PairConfig = PairConfig()) -> tuple[pd.DataFrame, dict]:
    """Build one dataset (``"policysm1"`` or ``"policysm2"``) over all splits.

    Args:
        sentences: the ``sentences`` table (doc_id, sent_idx, clauses); sentences of a document
            are ordered by sent_idx.
        split_of: doc_id -> split from :func:`split_documents`.

    Returns:
        ``(pairs, stats)``: columns :data:`PAIR_COLUMNS` (label 1 = adjacent, 0 = not); stats
        counts pairs per split and label and per kind, and the duplicates/conflicts dropped.

    Raises:
        ValueError: unknown dataset name.
    """
    if dataset not in ("policysm1", "policysm2"):
        raise ValueError(f"unknown dataset {dataset!r}")
    sents = sentences.sort_values(["doc_id", "sent_idx"]).copy()
    sents["pos"] = sents.groupby("doc_id").cumcount()
    sents["split"] = sents["doc_id"].map(split_of)
    rows, dropped = [], {"duplicate": 0, "conflict": 0}
    positives_seen: set = set()
    kept_pos: dict[str, list[tuple]] = {}
    for split in SPLITS:
        kept_pos[split] = []
        for doc, i, a, b in _positives(sents[sents["split"] == split], cfg):
            if (a, b) in positives_seen:
                dropped["duplicate"] += 1
                continue
            positives_seen.add((a, b))
            kept_pos[split].append((doc, i, a, b))
            rows.append((a, b, 1, "positive", 0, doc, doc, split))
    seen = set(positives_seen)
    for split in SPLITS:
        rng = _rng(cfg.seed, dataset, split)
        pos = kept_pos[split]
        negs = (_sm1_negatives(pos, cfg, rng) if dataset == "policysm1"
                else _sm2_negatives(sents[sents["split"] == split], pos, cfg, rng, set(seen)))
        for a, b, kind, gap, da, db in negs:
            if (a, b) in seen:
                dropped["conflict" if (a, b) in positives_seen else "duplicate"] += 1
                continue
            seen.add((a, b))
            rows.append((a, b, 0, kind, gap, da, db, split))
    df = pd.DataFrame(rows, columns=["text_a", "text_b", "label", "kind", "gap", "doc_a", "doc_b", "split"])
    df["gap"] = df["gap"].astype("Int64")
    df.insert(0, "pair_id", [pair_id(a, b) for a, b in zip(df["text_a"], df["text_b"])])
    parts = []
    for split in SPLITS:
        part = df[df["split"] == split]
        parts.append(part.iloc[_rng(cfg.seed, dataset, split, "shuffle").permutation(len(part))])
    df = pd.concat(parts, ignore_index=True)[list(PAIR_COLUMNS)]
    stats = {
        "pairs": int(len(df)),
        "per_split_label": {s: {str(k): int(v) for k, v in df[df["split"] == s]["label"].value_counts().items()}
                            for s in SPLITS},
        "per_kind": {str(k): int(v) for k, v in df["kind"].value_counts().items()},
        "dropped": dropped,
        "documents_per_split": {s: sum(1 for v in split_of.values() if v == s) for s in SPLITS},
    }
    return df, stats
