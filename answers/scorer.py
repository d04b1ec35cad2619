"""The learned answer scorer (SPEC §9): two gradient-boosted tree ensembles (scikit-learn's
HistGradientBoosting, after LightGBM: Ke et al. 2017) stored as plain JSON numbers, fitted by
:mod:`answers.fit` from the shared NCPQA answer spans. (A logistic regression, :class:`LinearModel`, is the
simpler alternative; on held-out NCPQA questions the trees answer more questions right.)

- document model: P(this retrieved document holds the answer | document features) (binary log-loss);
- span model: the char-F1 of a span against the answer (0 when it does not overlap the gold span), given the
  span is in the answering document (squared error);
- a span's raw score is P(document) × span score; a Platt scaling (Platt 1999) of its log-odds, fitted on the
  training questions' top answers, turns it into P(the top answer overlaps the gold span): the ``score``
  users see, with ``threshold`` the level under which the stage says "no answer found".

Only numbers and names are stored (never pickles), so a scorer file can be read without trusting it.
"""
from __future__ import annotations

import json
import os
from dataclasses import asdict, dataclass, field
from pathlib import Path

import numpy as np

SCORER_FILE = "answers/scorer.json"
FORMAT = 1


class ScorerMissingError(FileNotFoundError):
    """No fitted answer scorer where one was looked for (the message says how to fit one)."""


@dataclass
class LinearModel:
    """A logistic regression over standardised features: ``sigmoid(((x - mean) / scale) @ coef + intercept)``."""

    names: list[str]
    mean: list[float]
    scale: list[float]
    coef: list[float]
    intercept: float

    def logit(self, x: np.ndarray) -> np.ndarray:
        """Log-odds (n,) for features ``x`` (n, len(names))."""
        z = (np.asarray(x, dtype=np.float64) - np.asarray(self.mean)) / np.asarray(self.scale)
        return z @ np.asarray(self.coef) + self.intercept

    def predict(self, x: np.ndarray) -> np.ndarray:
        """Probabilities (n,) in (0, 1)."""
        return 1.0 / (1.0 + np.exp(-self.logit(x)))

    @classmethod
    def fit(cls, names, x: np.ndarray, y: np.ndarray, c: float = 1.0) -> "LinearModel":
        """Fit on features ``x`` (n, d) and targets ``y`` (n,) in [0, 1] (soft targets become two weighted
        rows) with scikit-learn's L2-regularised logistic regression (inverse strength ``c``).

        Raises:
            ValueError: ``y`` holds only one class.
        """
        from sklearn.linear_model import LogisticRegression

        x = np.asarray(x, dtype=np.float64)
        y = np.clip(np.asarray(y, dtype=np.float64), 0.0, 1.0)
        mean, scale = x.mean(0), x.std(0)
        scale[scale == 0] = 1.0
        z = (x - mean) / scale
        xx = np.vstack([z, z])
        yy = np.r_[np.ones(len(y)), np.zeros(len(y))]
        w = np.r_[y, 1.0 - y]
        keep = w > 0
        if len(set(yy[keep])) < 2:
            raise ValueError("the training targets hold a single class: nothing to learn")
        lr = LogisticRegression(C=c, max_iter=5000).fit(xx[keep], yy[keep], sample_weight=w[keep])
        return cls(list(names), mean.tolist(), scale.tolist(), lr.coef_[0].tolist(), float(lr.intercept_[0]))


@dataclass
class TreeModel:
    """A tree ensemble as plain numbers: ``baseline`` + the sum of one leaf value per tree; ``link``
    ``identity`` (regression, clipped to [1e-4, 1]) or ``logistic`` (probability). Each tree is a list of
    nodes ``[feature, threshold, missing_left, left, right, is_leaf, value]``: go left when
    ``x[feature] <= threshold`` (or the value is NaN and ``missing_left``)."""

    names: list[str]
    baseline: float
    link: str
    trees: list[list[list[float]]]
    kind: str = "trees"

    def raw(self, x: np.ndarray) -> np.ndarray:
        """Summed leaf values plus the baseline, (n,) for ``x`` (n, len(names))."""
        x = np.asarray(x, dtype=np.float64)
        out = np.full(len(x), self.baseline)
        rows = np.arange(len(x))
        for tree in self.trees:
            t = np.asarray(tree, dtype=np.float64)
            node = np.zeros(len(x), dtype=np.int64)
            while True:
                leaf = t[node, 5] > 0
                if leaf.all():
                    break
                v = x[rows, t[node, 0].astype(np.int64)]
                left = np.where(np.isnan(v), t[node, 2] > 0, v <= t[node, 1])
                node = np.where(leaf, node, np.where(left, t[node, 3], t[node, 4]).astype(np.int64))
            out += t[node, 6]
        return out

    def predict(self, x: np.ndarray) -> np.ndarray:
        """Probabilities (logistic link) or clipped regression values (identity link), (n,)."""
        r = self.raw(x)
        return 1.0 / (1.0 + np.exp(-r)) if self.link == "logistic" else np.clip(r, 1e-4, 1.0)

    @classmethod
    def fit(cls, names, x: np.ndarray, y: np.ndarray, classifier: bool, seed: int = 0) -> "TreeModel":
        """Fit scikit-learn's HistGradientBoosting (classifier: log-loss on 0/1 ``y``, 100 trees of 7 leaves;
        regressor: squared error, 150 trees of 15 leaves; learning rate 0.05, seeded) and export its trees.

        Raises:
            RuntimeError: the exported trees do not reproduce scikit-learn's predictions (its internals
                changed: pin the version in pyproject.toml).
        """
        from sklearn.ensemble import HistGradientBoostingClassifier, HistGradientBoostingRegressor

        x = np.asarray(x, dtype=np.float64)
        if classifier:
            est = HistGradientBoostingClassifier(max_iter=100, learning_rate=0.05, max_leaf_nodes=7,
                                                 min_samples_leaf=20, random_state=seed).fit(x, y)
        else:
            est = HistGradientBoostingRegressor(max_iter=150, learning_rate=0.05, max_leaf_nodes=15,
                                                min_samples_leaf=40, random_state=seed).fit(x, y)
        trees = [[[int(n["feature_idx"]), float(n["num_threshold"]), int(n["missing_go_to_left"]), int(n["left"]),
                   int(n["right"]), int(n["is_leaf"]), float(n["value"])] for n in p[0].nodes]
                 for p in est._predictors]
        model = cls(list(names), float(np.ravel(est._baseline_prediction)[0]),
                    "logistic" if classifier else "identity", trees)
        want = est.predict_proba(x)[:, 1] if classifier else np.clip(est.predict(x), 1e-4, 1.0)
        if not np.allclose(model.predict(x), want, atol=1e-6):
            raise RuntimeError("exported trees disagree with scikit-learn's predictions")
        return model


def _model(d: dict):
    return TreeModel(**d) if d.get("kind") == "trees" else LinearModel(**{k: v for k, v in d.items() if k != "kind"})


@dataclass
class AnswerScorer:
    """The document and span models, the Platt calibration (``calib_a``, ``calib_b``), the no-answer
    ``threshold`` on the calibrated score, and ``info`` (what it was fitted on: split, seed, counts, encoder)."""

    doc: "LinearModel | TreeModel"
    span: "LinearModel | TreeModel"
    calib_a: float = 1.0
    calib_b: float = 0.0
    threshold: float = 0.2
    info: dict = field(default_factory=dict)

    def calibrate(self, raw: np.ndarray) -> np.ndarray:
        """P(correct) from raw scores P(doc) × span score (any shape)."""
        r = np.clip(np.asarray(raw, dtype=np.float64), 1e-9, 1 - 1e-9)
        return 1.0 / (1.0 + np.exp(-(self.calib_a * np.log(r / (1 - r)) + self.calib_b)))

    def to_json(self) -> str:
        """The scorer as JSON text (format version, models, calibration, threshold, info)."""
        return json.dumps({"format": FORMAT, **asdict(self)}, ensure_ascii=False, indent=1)

    @classmethod
    def from_json(cls, text: str) -> "AnswerScorer":
        """Parse :meth:`to_json` output.

        Raises:
            ValueError: not a scorer of this format, or fields missing.
        """
        d = json.loads(text)
        if not isinstance(d, dict) or d.get("format") != FORMAT:
            raise ValueError(f"not an answer scorer of format {FORMAT}")
        try:
            return cls(_model(d["doc"]), _model(d["span"]), float(d["calib_a"]), float(d["calib_b"]),
                       float(d["threshold"]), dict(d.get("info", {})))
        except (KeyError, TypeError) as exc:
            raise ValueError(f"answer scorer file lacks a field: {exc}") from exc

    def save(self, path: str | os.PathLike) -> Path:
        """Write atomically to ``path`` (folders made)."""
        from storage import atomic_write_text

        Path(path).parent.mkdir(parents=True, exist_ok=True)
        return atomic_write_text(path, self.to_json())


def default_cache() -> Path:
    """``$POLICYBERT_ANSWER_SCORER`` if set, else ``~/.cache/policybert/answer-scorer.json``."""
    env = os.environ.get("POLICYBERT_ANSWER_SCORER")
    return Path(env) if env else Path.home() / ".cache" / "policybert" / "answer-scorer.json"


def find_scorer(data_dir: str | os.PathLike, explicit: str | os.PathLike | None = None) -> Path:
    """Where the scorer is: ``explicit``, else ``DATA/answers/scorer.json``, else :func:`default_cache`.

    Raises:
        ScorerMissingError: none of these exists.
    """
    cands = [Path(explicit)] if explicit else [Path(data_dir) / SCORER_FILE, default_cache()]
    for p in cands:
        if p.is_file():
            return p
    raise ScorerMissingError(
        "no answer scorer found (looked in " + ", ".join(map(str, cands)) + "); fit one from the shared NCPQA "
        "answer spans: python -m flows.answer_eval --data-dir DATA_NCPQA --fit --install "
        "(see README, 'Answers with sources')")


def load_scorer(data_dir: str | os.PathLike, explicit: str | os.PathLike | None = None) -> AnswerScorer:
    """The scorer found by :func:`find_scorer`.

    Raises:
        ScorerMissingError: none found. ValueError: the file is not a scorer, or one fitted on other features
            (:func:`check_features`).
    """
    p = find_scorer(data_dir, explicit)
    try:
        return check_features(AnswerScorer.from_json(p.read_text(encoding="utf-8")))
    except (ValueError, json.JSONDecodeError) as exc:
        raise ValueError(f"{p} is not a readable answer scorer ({exc}): fit it again") from exc


def check_features(scorer: AnswerScorer) -> AnswerScorer:
    """``scorer`` when its models were fitted on the features :mod:`answers.features` computes now.

    Raises:
        ValueError: a model names other features (a scorer fitted by another version of the code).
    """
    from answers.features import DOC_FEATURES, SPAN_FEATURES

    for what, model, names in (("document", scorer.doc, DOC_FEATURES), ("span", scorer.span, SPAN_FEATURES)):
        if list(model.names) != list(names):
            extra = sorted(set(names) ^ set(model.names))
            raise ValueError(f"its {what} model was fitted on other features than this code computes "
                             f"(differing: {', '.join(extra) or 'their order'})")
    return scorer
