"""Non-neural baselines for PolicySM pairs: what a learned matcher has to beat (SPEC §5-6).

- ``majority``: the train split's majority label.
- ``overlap_lr``: a logistic regression on surface overlap features of each pair: character
  Jaccard, BM25 score of b against a and of a against b (Okapi BM25, k1 1.5, b 0.75, chars as
  terms, idf from the train split's clauses), and the lengths of a and b. It cannot learn word order
  or meaning, only how much the two clauses share.

Both are fitted on ``train`` and scored on ``dev``/``test`` of the same split the model uses.
"""
from __future__ import annotations

from collections import Counter

import numpy as np
import pandas as pd

from model.features import to_chars

K1, B = 1.5, 0.75


def _idf(texts: pd.Series) -> dict[str, float]:
    """BM25 idf per char over ``texts`` as documents: ``log(1 + (N - df + 0.5) / (df + 0.5))``."""
    df = Counter(c for t in texts for c in set(to_chars(t)))
    n = len(texts)
    return {c: float(np.log(1 + (n - k + 0.5) / (k + 0.5))) for c, k in df.items()}


def _bm25(query: list[str], doc: list[str], idf: dict[str, float], avgdl: float, unseen: float) -> float:
    tf = Counter(doc)
    norm = K1 * (1 - B + B * len(doc) / avgdl)
    return sum(idf.get(t, unseen) * tf[t] * (K1 + 1) / (tf[t] + norm) for t in set(query) if t in tf)


def overlap_features(pairs: pd.DataFrame, idf: dict[str, float], avgdl: float) -> np.ndarray:
    """(n_pairs, 5) float: char Jaccard, BM25(b | a), BM25(a | b), len a, len b (chars)."""
    unseen = max(idf.values(), default=1.0)
    rows = []
    for a, b in zip(pairs["text_a"], pairs["text_b"]):
        ca, cb = to_chars(a), to_chars(b)
        sa, sb = set(ca), set(cb)
        jac = len(sa & sb) / len(sa | sb) if sa | sb else 0.0
        rows.append((jac, _bm25(cb, ca, idf, avgdl, unseen), _bm25(ca, cb, idf, avgdl, unseen), len(ca), len(cb)))
    return np.asarray(rows, dtype=float).reshape(-1, 5)


def classification_scores(pred: np.ndarray, gold: np.ndarray) -> dict:
    """Accuracy, F1 of the positive class (label 1) and the number of examples of 0/1 predictions."""
    tp = int(((pred == 1) & (gold == 1)).sum())
    prec, rec = tp / max(int((pred == 1).sum()), 1), tp / max(int((gold == 1).sum()), 1)
    return {"accuracy": float((pred == gold).mean()) if len(gold) else 0.0,
            "f1": 2 * prec * rec / (prec + rec) if prec + rec else 0.0, "examples": int(len(gold))}


def pair_baselines(splits: dict[str, pd.DataFrame]) -> dict:
    """Fit the baselines on ``splits["train"]`` and score them on ``dev`` and ``test``.

    Args:
        splits: ``train``/``dev``/``test`` -> pairs with ``text_a``, ``text_b``, ``label`` (0/1).

    Returns:
        ``{"majority": {"dev": {...}, "test": {...}}, "overlap_lr": {...}}``, each split's dict with
        accuracy, F1 of label 1 and examples.

    Raises:
        ValueError: the train split is empty or holds one label only.
    """
    train = splits["train"]
    predict = fit_overlap_lr(train)
    major = int(train["label"].mode()[0])
    out: dict = {"majority": {}, "overlap_lr": {}}
    for s in ("dev", "test"):
        gold = splits[s]["label"].to_numpy()
        out["majority"][s] = classification_scores(np.full(len(gold), major), gold)
        out["overlap_lr"][s] = classification_scores(predict(splits[s]), gold)
    return out


def fit_overlap_lr(train: pd.DataFrame):
    """Fit the ``overlap_lr`` baseline on pairs (text_a, text_b, label) and return ``pairs -> (n,) labels``.

    Raises:
        ValueError: the train split is empty or holds one label only.
    """
    from sklearn.linear_model import LogisticRegression
    from sklearn.pipeline import make_pipeline
    from sklearn.preprocessing import StandardScaler

    if not len(train) or train["label"].nunique() < 2:
        raise ValueError("pair baselines need a train split with both labels")
    texts = pd.concat([train["text_a"], train["text_b"]], ignore_index=True)
    idf = _idf(texts)
    avgdl = float(np.mean([len(to_chars(t)) for t in texts])) or 1.0
    clf = make_pipeline(StandardScaler(), LogisticRegression(max_iter=1000))
    clf.fit(overlap_features(train, idf, avgdl), train["label"].to_numpy())
    return lambda pairs: clf.predict(overlap_features(pairs, idf, avgdl)) if len(pairs) else np.array([])
