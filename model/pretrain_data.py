"""Pretraining examples per epoch (SPEC §6): NSP pairs with whole-word masking.

NSP: for each sentence i of a document that has a next sentence, half the time B is sentence i+1
(label 0, "is next"), else a random sentence of another document of the same split (label 1);
the thesis code made every B random, a trivial task. Whole-word masking: the segmented words of A
and B are the masking units; units are drawn until ``mask_prob`` of the chars are covered, and
each chosen unit is replaced as a whole by ``[MASK]`` (80%), random chars (10%) or kept (10%).
Vocabulary words are matched after masking: a word that overlaps any predicted char is dropped from
``word_ids``/``word_spans`` before the ``max_words`` cap (as ZEN drops the n-grams broken by
``[MASK]``; here also those over kept and replaced chars), so the word encoder never sees the identity
of a masked word. Deterministic per (seed, epoch).
"""
from __future__ import annotations

import hashlib
from dataclasses import dataclass

import numpy as np
import pandas as pd

from model.features import CharEncoder, WordMatcher, encode_chars, match_pair, select_words, to_chars

PRETRAIN_COLUMNS = ("doc_id", "sent_idx", "input_ids", "token_type_ids", "word_ids", "word_spans",
                    "mlm_labels", "nsp_label", "split")


@dataclass(frozen=True)
class PretrainDataConfig:
    """max_len: chars incl. [CLS]/[SEP] (128); max_words: word matches kept (40); mask_prob: share
    of chars masked (0.15); random_next_prob: share of NSP pairs whose B is random (0.5)."""

    max_len: int = 128
    max_words: int = 40
    mask_prob: float = 0.15
    random_next_prob: float = 0.5
    seed: int = 13


def _rng(seed: int, *parts) -> np.random.Generator:
    d = hashlib.sha256("|".join(map(str, (seed, *parts))).encode()).digest()
    return np.random.default_rng(int.from_bytes(d[:8], "little"))


def _units(words, offset: int, limit: int) -> list[tuple[int, int]]:
    """(start, length) spans of segmented words, shifted by offset, inside the first ``limit`` chars."""
    out, pos = [], 0
    for w in words:
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
        rand = enc.random_ids(ln, rng)
        for j in range(ln):
            labels[start + j] = ids[start + j]
            if r < 0.8:
                ids[start + j] = enc.mask
            elif r < 0.9:
                ids[start + j] = int(rand[j])
        if covered >= budget:
            break
    return ids, labels


def build_pretrain_epoch(sentences: pd.DataFrame, segments: pd.DataFrame, split_of: dict[str, str],
                         enc: CharEncoder, matcher: WordMatcher, cfg: PretrainDataConfig, epoch: int
                         ) -> tuple[pd.DataFrame, dict]:
    """Build one epoch of pretraining examples.

    Args:
        sentences: doc_id, sent_idx, text; segments: doc_id, sent_idx, words (same sentences).
        split_of: doc_id -> train/dev/test (dev and test documents are held out for evaluation;
            their random B sentences come from held-out documents only).

    Returns:
        ``(examples, stats)``: columns :data:`PRETRAIN_COLUMNS`; stats counts examples per split,
        the share of random-next pairs and of masked chars.
    """
    df = sentences[["doc_id", "sent_idx", "text"]].merge(segments[["doc_id", "sent_idx", "words"]],
                                                         on=["doc_id", "sent_idx"], how="inner")
    df = df.sort_values(["doc_id", "sent_idx"]).reset_index(drop=True)
    df["split"] = df["doc_id"].map(split_of)
    df["pool"] = (df["split"] != "train").map({False: "train", True: "heldout"})
    rows = []
    for pool, part in df.groupby("pool", sort=True):
        # random B sentences come from the same pool: training documents never meet held-out ones
        rng = _rng(cfg.seed, epoch, pool)
        texts, words, docs, idxs, splits = (part["text"].tolist(), part["words"].tolist(), part["doc_id"].tolist(),
                                            part["sent_idx"].tolist(), part["split"].tolist())
        n = len(texts)
        multi_doc = len(set(docs)) > 1
        for i in range(n - 1):
            if docs[i + 1] != docs[i]:
                continue
            j, label = i + 1, 0
            if multi_doc and rng.random() < cfg.random_next_prob:
                for _ in range(20):
                    cand = int(rng.integers(n))
                    if docs[cand] != docs[i]:
                        j, label = cand, 1
                        break
            ca, cb = to_chars(texts[i]), to_chars(texts[j])
            ids, tt, a, b = encode_chars(ca, cb, enc, cfg.max_len)
            units = _units(words[i], 1, len(a)) + _units(words[j], len(a) + 2, len(b))
            ids, labels = whole_word_mask(ids, units, enc, cfg.mask_prob, rng)
            # words are matched after masking: any word over a predicted position is dropped (no leak)
            word_ids, spans = select_words(match_pair(a, b, matcher), cfg.max_words, rng, labels)
            rows.append((docs[i], idxs[i], ids, tt, word_ids, [list(s) for s in spans], labels, label, splits[i]))
    out = pd.DataFrame(rows, columns=list(PRETRAIN_COLUMNS))
    masked = sum(sum(1 for x in lab if x != -100) for lab in out["mlm_labels"]) if len(out) else 0
    tokens = int(out["input_ids"].str.len().sum()) if len(out) else 0
    stats = {"epoch": epoch, "examples": int(len(out)),
             "per_split": {str(k): int(v) for k, v in out["split"].value_counts().items()},
             "random_next_share": float(out["nsp_label"].mean()) if len(out) else 0.0,
             "masked_share": masked / tokens if tokens else 0.0}
    return out, stats
