"""Exact and near-duplicate document removal (SPEC §3).

Exact duplicates: same sha256 of the normalised text (NFKC, whitespace removed). Near duplicates:
MinHash signatures over character shingles (datasketch), LSH banding for candidates (each band
independent, so it can run partitioned), each candidate pair verified by its Jaccard estimate against
the threshold. In each group the kept copy is the earliest published one, then the longest, then the
first in input order.

Policies of different places are never duplicates (SPEC §7: jurisdiction is part of what a policy is): a city
that adopts its neighbour's rule word for word has its own rule, and dropping either copy would answer one
place's question with the other's. :func:`place_keys` gives each document the place its import ``region`` or
its title names (``""`` when neither names one); only documents with equal keys are compared.

Streaming (SPEC §1): :func:`doc_keys` computes a document's exact-duplicate key and MinHash signature
(uint32, ``num_perm`` x 4 bytes) group by group; :func:`duplicates_from_keys` then decides over the whole
corpus holding only these keys (a few hundred bytes per document), never the texts.
"""
from __future__ import annotations

import hashlib
import re
import unicodedata
from dataclasses import dataclass

import numpy as np
import pandas as pd
from datasketch import MinHash

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


def _keep_order(pubtime, lengths) -> list[int]:
    """Row positions ordered by preference: earliest pubtime (missing last), longest text, input order."""
    pub = pd.to_datetime(pd.Series(list(pubtime), dtype=object), errors="coerce")
    key = pd.DataFrame({"pub": pub, "neg_len": -np.asarray(lengths, dtype=np.int64), "pos": range(len(pub))})
    return key.sort_values(["pub", "neg_len", "pos"], na_position="last")["pos"].tolist()


def _minhash(text: str, shingle: int, num_perm: int) -> MinHash:
    m = MinHash(num_perm=num_perm, seed=1)
    grams = {text[i:i + shingle] for i in range(max(len(text) - shingle + 1, 1))}
    m.update_batch([g.encode("utf-8") for g in grams])
    return m


def signatures(texts: list[str], shingle: int = 5, num_perm: int = 128) -> np.ndarray:
    """MinHash signatures (datasketch, seed 1) of whitespace-free texts over character ``shingle``-grams:
    uint32 array (n_texts, num_perm) (datasketch's hash values are below 2**32)."""
    out = np.zeros((len(texts), num_perm), dtype=np.uint32)
    for i, text in enumerate(texts):
        out[i] = _minhash(_WS.sub("", text), shingle, num_perm).hashvalues
    return out


def lsh_bands(threshold: float, num_perm: int) -> tuple[int, int]:
    """``(bands, rows)`` of the LSH banding that minimises false positives + negatives at ``threshold``
    (datasketch's optimisation, the one ``MinHashLSH`` uses)."""
    from datasketch.lsh import _optimal_param

    return _optimal_param(threshold, num_perm, 0.5, 0.5)


def band_candidates(sigs: np.ndarray, bands: tuple[int, int], band_ids: range | None = None) -> set[tuple[int, int]]:
    """Candidate pairs ``(i, j)``, i < j, of rows sharing a bucket in any of ``band_ids`` (default: all bands).

    Each band is independent, so the bands can be processed in separate partitions (workers) and their
    candidate sets unioned: the result is the same.
    """
    b, r = bands
    pairs: set[tuple[int, int]] = set()
    for band in band_ids if band_ids is not None else range(b):
        buckets: dict[bytes, list[int]] = {}
        for i, row in enumerate(sigs[:, band * r:(band + 1) * r]):
            buckets.setdefault(row.tobytes(), []).append(i)
        for members in buckets.values():
            pairs.update((a, c) for k, a in enumerate(members) for c in members[k + 1:])
    return pairs


def jaccard_estimate(a: np.ndarray, b: np.ndarray) -> float:
    """MinHash estimate of the Jaccard similarity of two signatures: the share of equal hash values."""
    return float(np.mean(a == b))


def near_duplicates(sigs: np.ndarray, threshold: float, bands: tuple[int, int] | None = None,
                    groups: list[str] | None = None) -> dict[int, int]:
    """Near duplicates among rows given in preference order: ``{row: kept_row}``.

    Candidates come from LSH banding (:func:`band_candidates`) and count only when their Jaccard
    estimate reaches ``threshold`` and, with ``groups`` (one key per row), their keys are equal. Walking rows
    in order, a row is a duplicate of the earliest kept row it matches; a row that is itself a duplicate never
    keeps another (no chains).
    """
    bands = bands or lsh_bands(threshold, sigs.shape[1])
    matches: dict[int, list[int]] = {}
    for i, j in band_candidates(sigs, bands):
        if groups is not None and groups[i] != groups[j]:
            continue
        if jaccard_estimate(sigs[i], sigs[j]) >= threshold:
            matches.setdefault(j, []).append(i)
    out: dict[int, int] = {}
    for j in sorted(matches):
        kept = [i for i in sorted(matches[j]) if i not in out]
        if kept:
            out[j] = kept[0]
    return out


def place_keys(titles: list, regions: list | None = None) -> list[str]:
    """Per document, the division code of the place it is a policy of, as far as cheap evidence tells.

    The first place its import ``region`` value names, else the first place its title names
    (:func:`corpus.divisions.find_places`: ``浙江省安全生产条例`` -> ``330000``), narrowed along places named
    right after it inside it (``山东省济南市`` -> ``370100``); ``""`` when neither names a place (a national or
    unplaced document). ``titles`` and ``regions`` (None: no region column) hold one value per document, any
    non-string read as absent. Two documents are compared for duplication only when their keys are equal."""
    from corpus.divisions import contains, find_places  # loaded on first use: cpca's table, an automaton

    out = []
    for k, title in enumerate(titles):
        region = regions[k] if regions is not None else None
        places = []
        for text in (region, title):
            if isinstance(text, str) and text.strip():
                places = find_places(text)
                if places:
                    break
        code = places[0].code if places else ""
        for p in places[1:]:  # 山东省济南市: the narrowest of a chain of places inside each other
            if not contains(code, p.code):
                break
            code = p.code
        out.append(code)
    return out


def doc_keys(texts: list[str], *, near: bool = True, shingle: int = 5, num_perm: int = 128
             ) -> tuple[list[str], np.ndarray]:
    """Per text: its exact-duplicate key (:func:`normalized_hash`) and, with ``near``, its MinHash
    signature (:func:`signatures`; a (n, 0) array without). Computed per group of documents."""
    sigs = signatures(texts, shingle, num_perm) if near else np.zeros((len(texts), 0), dtype=np.uint32)
    return [normalized_hash(t) for t in texts], sigs


def duplicates_from_keys(ids: list[str], pubtime: list, lengths: list[int], hashes: list[str],
                         sigs: np.ndarray, *, near_threshold: float = 0.9,
                         bands: tuple[int, int] | None = None, places: list[str] | None = None) -> list[Duplicate]:
    """Exact and near duplicates from per-document keys (all lists in input order, one entry per document).

    Args:
        ids, pubtime, lengths: doc_id, publication date (None/NaT when unknown), text length (chars);
        hashes, sigs: from :func:`doc_keys`; near_threshold, bands: as :func:`find_duplicates`;
        places: :func:`place_keys` (None: every document in one place): documents of different places are
            never duplicates.

    Returns:
        As :func:`find_duplicates`: exact duplicates in preference order, then near duplicates in
        preference order of the exact survivors; each points at its kept copy (earliest published, then
        longest, then first in input order).
    """
    order = _keep_order(pubtime, lengths)
    dups: list[Duplicate] = []
    kept_by_hash: dict[str, str] = {}
    survivors: list[int] = []
    for pos in order:
        h = (places[pos], hashes[pos]) if places is not None else hashes[pos]
        if h in kept_by_hash:
            dups.append(Duplicate(ids[pos], kept_by_hash[h], "exact"))
        else:
            kept_by_hash[h] = ids[pos]
            survivors.append(pos)
    if near_threshold <= 0 or len(survivors) < 2:
        return dups
    groups = [places[p] for p in survivors] if places is not None else None
    for row, kept in sorted(near_duplicates(sigs[survivors], near_threshold, bands, groups).items()):
        dups.append(Duplicate(ids[survivors[row]], ids[survivors[kept]], "near"))
    return dups


def find_duplicates(docs: pd.DataFrame, *, near_threshold: float = 0.9, shingle: int = 5,
                    num_perm: int = 128, bands: tuple[int, int] | None = None) -> list[Duplicate]:
    """Find exact and near duplicates among ``docs`` (columns doc_id, pubtime, text; optional title and
    region: documents of different places, :func:`place_keys`, are never duplicates).

    Args:
        near_threshold: Jaccard threshold in (0, 1] for near duplicates (MinHash LSH candidates verified by
            their Jaccard estimate); 0 disables near-dup detection.
        shingle: character n-gram size; num_perm: MinHash permutations.
        bands: LSH ``(bands, rows per band)``; default :func:`lsh_bands` for the threshold.

    Returns:
        One :class:`Duplicate` per removed document, pointing at the kept copy: the earliest published,
        then the longest, then the first in input order (each kept document appears only as ``kept_id``).
    """
    texts = docs["text"].tolist()
    hashes, sigs = doc_keys(texts, near=near_threshold > 0, shingle=shingle, num_perm=num_perm)
    places = place_keys(docs["title"].tolist() if "title" in docs else [None] * len(docs),
                        docs["region"].tolist() if "region" in docs else None)
    return duplicates_from_keys(docs["doc_id"].tolist(), docs["pubtime"].tolist(), [len(t) for t in texts],
                                hashes, sigs, near_threshold=near_threshold, bands=bands, places=places)
