"""Exact and near-duplicate document removal (SPEC §3).

Exact duplicates: same sha256 of the normalised text (NFKC, whitespace removed). Near duplicates:
MinHash over character shingles with LSH (datasketch), Jaccard threshold configurable. In each
group the kept copy is the earliest published one, then the longest, then the first in input order.
"""
from __future__ import annotations

import hashlib
import re
import unicodedata
from dataclasses import dataclass

import pandas as pd
from datasketch import MinHash, MinHashLSH

_WS = re.compile(r"\s+")


def normalized_hash(text: str) -> str:
    """sha256 of the text after NFKC and whitespace removal (the exact-duplicate key)."""
    norm = _WS.sub("", unicodedata.normalize("NFKC", text))
    return hashlib.sha256(norm.encode("utf-8")).hexdigest()


@dataclass(frozen=True)
class Duplicate:
    """A removed document: ``doc_id`` duplicates ``kept_id``; ``kind`` is ``exact`` or ``near``."""

    doc_id: str
    kept_id: str
    kind: str


def _keep_order(docs: pd.DataFrame) -> list[int]:
    """Row positions ordered by preference: earliest pubtime (missing last), longest text, input order."""
    pub = pd.to_datetime(docs["pubtime"], errors="coerce")
    key = pd.DataFrame({"pub": pub, "neg_len": -docs["text"].str.len(), "pos": range(len(docs))})
    return key.sort_values(["pub", "neg_len", "pos"], na_position="last")["pos"].tolist()


def _minhash(text: str, shingle: int, num_perm: int) -> MinHash:
    m = MinHash(num_perm=num_perm, seed=1)
    grams = {text[i:i + shingle] for i in range(max(len(text) - shingle + 1, 1))}
    m.update_batch([g.encode("utf-8") for g in grams])
    return m


def find_duplicates(docs: pd.DataFrame, *, near_threshold: float = 0.9, shingle: int = 5,
                    num_perm: int = 128) -> list[Duplicate]:
    """Find exact and near duplicates among ``docs`` (columns doc_id, pubtime, text).

    Args:
        near_threshold: MinHash-LSH Jaccard threshold in (0, 1]; 0 disables near-dup detection.
        shingle: character n-gram size; num_perm: MinHash permutations.

    Returns:
        One :class:`Duplicate` per removed document (each kept document appears only as ``kept_id``).
    """
    order = _keep_order(docs)
    ids = docs["doc_id"].tolist()
    texts = docs["text"].tolist()
    dups: list[Duplicate] = []
    kept_by_hash: dict[str, str] = {}
    survivors: list[int] = []
    for pos in order:
        h = normalized_hash(texts[pos])
        if h in kept_by_hash:
            dups.append(Duplicate(ids[pos], kept_by_hash[h], "exact"))
        else:
            kept_by_hash[h] = ids[pos]
            survivors.append(pos)
    if near_threshold <= 0:
        return dups
    lsh = MinHashLSH(threshold=near_threshold, num_perm=num_perm)
    for pos in survivors:
        norm = _WS.sub("", texts[pos])
        mh = _minhash(norm, shingle, num_perm)
        hits = lsh.query(mh)
        if hits:
            dups.append(Duplicate(ids[pos], sorted(hits)[0], "near"))
        else:
            lsh.insert(ids[pos], mh)
    return dups
