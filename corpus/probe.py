"""Shortcut probe (SPEC §5): can a trivial classifier on surface features beat the majority baseline?

A logistic regression on per-side presence of ``。！？；``, spaces, digits, latin letters, lengths of
each side and their difference, trained on the train split and scored on test. A leak-free
dataset keeps its accuracy near the majority baseline (the thesis's own files: 94.6%).
"""
from __future__ import annotations

import re

import numpy as np
import pandas as pd

_FEATURES = (re.compile(r"[。！？；]"), re.compile(r"\s"), re.compile(r"\d"), re.compile(r"[A-Za-z]"))


def surface_features(text_a: pd.Series, text_b: pd.Series) -> np.ndarray:
    """Feature matrix of shape (n_pairs, 11): 4 presence flags per side, len a, len b, len a - len b."""
    cols = []
    for side in (text_a, text_b):
        for pat in _FEATURES:
            cols.append(side.str.contains(pat).astype(float).to_numpy())
    la = text_a.str.len().to_numpy(dtype=float)
    lb = text_b.str.len().to_numpy(dtype=float)
    cols += [la, lb, la - lb]
    return np.stack(cols, axis=1)


def shortcut_probe(pairs: pd.DataFrame) -> dict:
    """Train on ``split == "train"``, score on ``split == "test"``.

    Returns:
        dict with accuracy, majority (baseline accuracy of the train majority label on test),
        margin (accuracy - majority), n_train, n_test. Accuracy is None when a split is empty
        or train holds one label only.
    """
    from sklearn.linear_model import LogisticRegression
    from sklearn.pipeline import make_pipeline
    from sklearn.preprocessing import StandardScaler

    train, test = pairs[pairs["split"] == "train"], pairs[pairs["split"] == "test"]
    out = {"n_train": int(len(train)), "n_test": int(len(test)), "accuracy": None, "majority": None, "margin": None}
    if not len(train) or not len(test) or train["label"].nunique() < 2:
        return out
    clf = make_pipeline(StandardScaler(), LogisticRegression(max_iter=1000))
    clf.fit(surface_features(train["text_a"], train["text_b"]), train["label"])
    acc = float((clf.predict(surface_features(test["text_a"], test["text_b"])) == test["label"]).mean())
    major = int(train["label"].mode()[0])
    base = float((test["label"] == major).mean())
    out.update(accuracy=acc, majority=base, margin=acc - base)
    return out
