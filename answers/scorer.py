"""The learned answer scorer (SPEC §9): gradient-boosted tree ensembles stored as plain JSON numbers,
fitted by :mod:`answers.fit` from the shared NCPQA answer spans.

- document model: P(this retrieved document holds the answer | document features) (scikit-learn's
  HistGradientBoosting classifier, binary log-loss);
- span model: a ranker of the spans of the answering document (LightGBM's LambdaRank, Burges 2010, Ke et al.
  2017), relevance the span's char-F1 against the answer in 10 grades (0 when it does not overlap the gold
  span): it learns which span is best among its neighbours, which a pointwise fit of the F1 (the ``product``
  scorer below) does not — on NCPQA's training questions (5-fold by document) top-1 char-F1 0.44 against 0.37;
- a span's raw score is log P(document) + its ranking score (``combine="rank"``); a Platt scaling (Platt 1999)
  of the raw score, fitted on the top answers of models that had not seen the question (:func:`answers.fit.
  fit_scorer`), turns it into P(the top answer overlaps the gold span): the ``score`` users see, with ``threshold`` the level under which the stage says "no answer
  found".
- the simpler alternatives (``combine="product"``): a logistic regression (:class:`LinearModel`) or a
  HistGradientBoosting regressor of the span's char-F1, raw score P(document) × span score, calibrated on its
  log-odds.

Only numbers and names are stored (never pickles), so a scorer file can be read without trusting it.
"""
from __future__ import annotations

import json
import os
from dataclasses import asdict, dataclass, field
from functools import cached_property
from pathlib import Path

import numpy as np

FORMAT = 2


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
    ``identity`` (regression, clipped to [1e-4, 1]), ``logistic`` (probability) or ``rank`` (a ranking score,
    unbounded: only its order within a question and its calibrated level mean anything). ``lightgbm``: the
    same trees in LightGBM's text model format when LightGBM fitted them, used (when LightGBM is installed)
    to score faster, after checking on random rows that it scores as the trees do. Each tree is a list of
    nodes ``[feature, threshold, missing_left, left, right, is_leaf, value]``: go left when
    ``x[feature] <= threshold`` (or the value is NaN and ``missing_left``)."""

    names: list[str]
    baseline: float
    link: str
    trees: list[list[list[float]]]
    kind: str = "trees"
    lightgbm: str = ""

    def raw(self, x: np.ndarray) -> np.ndarray:
        """Summed leaf values plus the baseline, (n,) for ``x`` (n, len(names)): LightGBM's own predictor when
        :meth:`booster` has one (on the machine's cores above 256 rows: a question's ~800 candidates score in
        ~3 ms on 2 cores against ~5.5 ms on one), else every row walks every tree at once, one level per step."""
        x = np.asarray(x, dtype=np.float64)
        booster = self.booster
        if booster is not None and len(x):
            return self.baseline + booster.predict(x, raw_score=True, num_threads=0 if len(x) > 256 else 1)
        return self._walk(x)

    @cached_property
    def booster(self):
        """A LightGBM ``Booster`` read from ``lightgbm`` (once), or None without that text or without
        LightGBM.

        Raises:
            ValueError: the text's trees score random rows differently from the JSON trees (the file was
                edited, or written by another version).
        """
        if not self.lightgbm:
            return None
        try:
            import lightgbm as lgb
        except ImportError:
            return None
        booster = lgb.Booster(model_str=self.lightgbm)
        x = np.random.default_rng(0).normal(0.0, 3.0, size=(64, len(self.names)))
        if booster.num_feature() != len(self.names) or not np.allclose(
                self.baseline + booster.predict(x, raw_score=True, num_threads=1), self._walk(x), atol=1e-6):
            raise ValueError("its LightGBM model text does not score as its trees do")
        return booster

    def _walk(self, x: np.ndarray) -> np.ndarray:
        """:meth:`raw` in numpy: every row walks every tree at once, one level per step."""
        out = np.full(len(x), self.baseline)
        if not self.trees or not len(x):
            return out
        t, roots = self._packed
        node = np.broadcast_to(roots, (len(x), len(roots))).copy()  # (n, n_trees) global node ids
        rows = np.arange(len(x))[:, None]
        while True:
            inner = t[node, 5] <= 0
            if not inner.any():
                break
            v = x[rows, t[node, 0].astype(np.int64)]
            left = np.where(np.isnan(v), t[node, 2] > 0, v <= t[node, 1])
            nxt = np.where(left, t[node, 3], t[node, 4]).astype(np.int64) + roots
            node = np.where(inner, nxt, node)
        return out + t[node, 6].sum(axis=1)

    @cached_property
    def _packed(self) -> tuple[np.ndarray, np.ndarray]:
        """All trees' nodes in one (n_nodes, 7) array and each tree's root row (n_trees,), built once."""
        arrays = [np.asarray(tree, dtype=np.float64).reshape(-1, 7) for tree in self.trees]
        return np.vstack(arrays), np.cumsum([0] + [len(a) for a in arrays[:-1]]).astype(np.int64)

    def predict(self, x: np.ndarray) -> np.ndarray:
        """Probabilities (logistic link), clipped regression values (identity link) or ranking scores (rank
        link), (n,)."""
        r = self.raw(x)
        if self.link == "rank":
            return r
        return 1.0 / (1.0 + np.exp(-r)) if self.link == "logistic" else np.clip(r, 1e-4, 1.0)

    @classmethod
    def fit_ranker(cls, names, x: np.ndarray, grade: np.ndarray, group: list[int], seed: int = 0) -> "TreeModel":
        """Fit LightGBM's LambdaRank (200 trees of 15 leaves, learning rate 0.05, at least 20 rows a leaf,
        linear gains of the integer ``grade``, NDCG truncated at 10) on rows ``x`` (n, d) in consecutive
        groups of sizes ``group`` (one per question; sum = n) and export its trees.

        Raises:
            ValueError: ``group`` does not add up to the rows, or no group holds two grades (nothing to rank).
            RuntimeError: the exported trees do not reproduce LightGBM's scores (its dump format changed: pin
                the version in pyproject.toml).
        """
        import lightgbm as lgb

        x, grade = np.asarray(x, dtype=np.float64), np.asarray(grade, dtype=int)
        if sum(group) != len(x) or len(grade) != len(x):
            raise ValueError(f"groups of {sum(group)} rows for {len(x)} rows and {len(grade)} grades")
        bounds = np.cumsum([0, *group])
        if not any(len(set(grade[a:b].tolist())) > 1 for a, b in zip(bounds[:-1], bounds[1:])):
            raise ValueError("no question has spans of two grades: nothing to rank")
        est = lgb.LGBMRanker(objective="lambdarank", n_estimators=200, learning_rate=0.05, num_leaves=15,
                             min_child_samples=20, label_gain=list(range(int(grade.max()) + 1)),
                             lambdarank_truncation_level=10, random_state=seed, n_jobs=1, verbose=-1)
        est.fit(x, grade, group=list(group))
        dump = est.booster_.dump_model()
        model = cls(list(names), 0.0, "rank", [_lgb_nodes(t["tree_structure"]) for t in dump["tree_info"]],
                    lightgbm=est.booster_.model_to_string())
        if not np.allclose(model._walk(x), est.predict(x), atol=1e-6):
            raise RuntimeError("exported trees disagree with LightGBM's scores")
        return model

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


def _lgb_nodes(root: dict) -> list[list[float]]:
    """One LightGBM tree (``dump_model``'s nested ``tree_structure``) as :class:`TreeModel` nodes, root first.

    Raises:
        ValueError: a split other than ``<=`` on a number (categorical splits are not used here).
    """
    nodes: list[list[float]] = []

    def visit(n: dict) -> int:
        i = len(nodes)
        nodes.append([])
        if "leaf_value" in n:
            nodes[i] = [0, 0.0, 0, 0, 0, 1, float(n["leaf_value"])]
            return i
        if n.get("decision_type") != "<=":
            raise ValueError(f"LightGBM split {n.get('decision_type')!r}: only numeric '<=' splits are exported")
        left, right = visit(n["left_child"]), visit(n["right_child"])
        missing_left = bool(n.get("default_left")) and n.get("missing_type") == "NaN"
        nodes[i] = [int(n["split_feature"]), float(n["threshold"]), int(missing_left), left, right, 0, 0.0]
        return i

    visit(root)
    return nodes


def zero_columns(x: np.ndarray, names, ignore) -> np.ndarray:
    """A float64 copy of the feature matrix ``x`` (n, len(names)) with the columns whose name is in ``ignore`` set
    to 0."""
    x = np.array(x, dtype=np.float64, copy=True)
    cols = [i for i, n in enumerate(names) if n in ignore]
    if cols and x.size:
        x[:, cols] = 0.0
    return x


def _model(d: dict):
    return TreeModel(**d) if d.get("kind") == "trees" else LinearModel(**{k: v for k, v in d.items() if k != "kind"})


@dataclass
class AnswerScorer:
    """The document and span models, the Platt calibration (``calib_a``, ``calib_b``), the no-answer
    ``threshold`` on the calibrated score, ``combine`` (``rank``: raw = log P(doc) + the span's ranking score;
    ``product``: raw = P(doc) × span score), ``info`` (what it was fitted on: split, seed, counts, encoder) and
    ``mbr_temperature``, the softmax temperature of the minimum-Bayes-risk choice of a document's span
    (:mod:`answers.decode`; 0: the best-scored span); ``ignores``: feature names (of either model) read as 0,
    fitted and served so (:data:`answers.features.ENCODER_FEATURES`: an encoder-free scorer, whose provenance pins
    no encoder)."""

    doc: "LinearModel | TreeModel"
    span: "LinearModel | TreeModel"
    calib_a: float = 1.0
    calib_b: float = 0.0
    threshold: float = 0.2
    info: dict = field(default_factory=dict)
    combine: str = "rank"
    mbr_temperature: float = 0.0
    ignores: tuple[str, ...] = ()

    def __post_init__(self):
        self.ignores = tuple(self.ignores)
        unknown = sorted(set(self.ignores) - set(self.doc.names) - set(self.span.names))
        if unknown:
            raise ValueError(f"ignores names features neither model reads: {unknown}")
        if self.combine not in ("rank", "product"):
            raise ValueError(f"combine = {self.combine!r}: 'rank' or 'product'")
        if not (np.isfinite(self.mbr_temperature) and self.mbr_temperature >= 0):
            raise ValueError(f"mbr_temperature = {self.mbr_temperature!r}: a finite number >= 0")

    def raw_scores(self, doc_x: np.ndarray, span_x: np.ndarray, span_doc: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
        """(P(doc) per document (n_docs,), raw score per span (n_spans,)) for the matrices of
        :class:`answers.features.Prepared`; ``span_doc`` (n_spans,) maps spans to documents."""
        doc_x, span_x = self.masked(doc_x, span_x)
        p_doc = self.doc.predict(doc_x)
        s = self.span.predict(span_x)
        if self.combine == "rank":
            return p_doc, np.log(np.clip(p_doc, 1e-9, 1.0))[span_doc] + s
        return p_doc, p_doc[span_doc] * s

    def masked(self, doc_x: np.ndarray, span_x: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
        """``(doc_x, span_x)`` with the columns of :attr:`ignores` set to 0 (copies; the inputs as they are when
        it ignores nothing)."""
        if not self.ignores:
            return doc_x, span_x
        return zero_columns(doc_x, self.doc.names, self.ignores), zero_columns(span_x, self.span.names, self.ignores)

    def level(self, raw: np.ndarray) -> np.ndarray:
        """The raw scores as the calibration reads them: as they are (``rank``) or their log-odds (``product``)."""
        r = np.asarray(raw, dtype=np.float64)
        if self.combine == "rank":
            return r
        r = np.clip(r, 1e-9, 1 - 1e-9)
        return np.log(r / (1 - r))

    def calibrate(self, raw: np.ndarray) -> np.ndarray:
        """P(correct) from raw scores (any shape; see ``combine``)."""
        return 1.0 / (1.0 + np.exp(-(self.calib_a * self.level(raw) + self.calib_b)))

    def to_json(self) -> str:
        """The scorer as JSON text (format version, models, calibration, threshold, info)."""
        return json.dumps({"format": FORMAT, **asdict(self)}, ensure_ascii=False, indent=1)

    @classmethod
    def from_json(cls, text: str) -> "AnswerScorer":
        """Parse :meth:`to_json` output.

        Raises:
            ValueError: not a scorer of this format (also: JSON nested too deep for the parser), fields
                missing, or a LightGBM text that does not score as its trees do.
        """
        try:
            d = json.loads(text)
        except RecursionError:
            raise ValueError("answer scorer file is nested too deep to be a scorer (not JSON this reader "
                             "takes)") from None
        if not isinstance(d, dict) or d.get("format") != FORMAT:
            raise ValueError(f"not an answer scorer of format {FORMAT}")
        try:
            scorer = cls(_model(d["doc"]), _model(d["span"]), float(d["calib_a"]), float(d["calib_b"]),
                         float(d["threshold"]), dict(d.get("info", {})), str(d["combine"]),
                         float(d.get("mbr_temperature", 0.0)), tuple(str(n) for n in d.get("ignores") or ()))
        except (KeyError, TypeError) as exc:
            raise ValueError(f"answer scorer file lacks a field: {exc}") from exc
        for model in (scorer.doc, scorer.span):
            if isinstance(model, TreeModel):
                _ = model.booster  # checks a LightGBM text against the trees
        return scorer

    def save(self, path: str | os.PathLike) -> Path:
        """Write atomically to ``path`` (folders made)."""
        from storage import atomic_write_text

        Path(path).parent.mkdir(parents=True, exist_ok=True)
        return atomic_write_text(path, self.to_json())


def parse_scorer(text: str, where: str = "answer scorer") -> AnswerScorer:
    """The scorer in ``text`` (:meth:`AnswerScorer.from_json`), checked against this code's features
    (:func:`check_features`).

    Raises:
        ValueError: naming ``where``: not a scorer, or one fitted on other features (fit it again).
    """
    try:
        return check_features(AnswerScorer.from_json(text))
    except (ValueError, RecursionError) as exc:  # JSONDecodeError is a ValueError
        raise ValueError(f"{where} is not a readable answer scorer of this code ({str(exc)[:200]}): fit it again") from None


def provenance(encoder_model_id: str | None, segmenter: str | None, fitted_on: str,
               answer_reranker: str | None = None) -> dict:
    """What a scorer's figures depend on, stored as ``info.provenance`` and checked when an index version
    installs it (:func:`retrieval.parts.install_part`): the pinned encoder's content id (left out for an
    encoder-free scorer, ``encoder_model_id`` None: it is installed over any encoder) and the BM25
    segmenter (``backend:model_id``) of the index it was fitted over, the feature names, what it was fitted on
    (a free text: data set, questions) and, for a scorer fitted on the answer cross-encoder's sentence scores
    (:mod:`answers.rerank_features`), ``answer_reranker``: the sha256 of that cross-encoder's part."""
    from answers.features import DOC_FEATURES, SPAN_FEATURES
    from answers.rerank_features import CE_FEATURES

    extra = {"answer_reranker": answer_reranker} if answer_reranker else {}
    encoder = {} if encoder_model_id is None else {"encoder_model_id": encoder_model_id}  # None: encoder-free
    return {**encoder, "segmenter": segmenter, "fitted_on": fitted_on,
            "doc_features": list(DOC_FEATURES),
            "span_features": list(SPAN_FEATURES + (CE_FEATURES if answer_reranker else ())), **extra}


def reads_reranker(scorer: AnswerScorer) -> bool:
    """Whether the scorer's span model reads the answer cross-encoder's features
    (:data:`answers.rerank_features.CE_FEATURES`)."""
    from answers.features import SPAN_FEATURES

    return len(scorer.span.names) > len(SPAN_FEATURES)


def check_features(scorer: AnswerScorer) -> AnswerScorer:
    """``scorer`` when its models were fitted on the features :mod:`answers.features` computes now (the span
    model: those, or those followed by :data:`answers.rerank_features.CE_FEATURES`).

    Raises:
        ValueError: a model names other features (a scorer fitted by another version of the code).
    """
    from answers.features import DOC_FEATURES, SPAN_FEATURES
    from answers.rerank_features import CE_FEATURES

    span = SPAN_FEATURES + CE_FEATURES if len(scorer.span.names) > len(SPAN_FEATURES) else SPAN_FEATURES
    for what, model, names in (("document", scorer.doc, DOC_FEATURES), ("span", scorer.span, span)):
        if list(model.names) != list(names):
            extra = sorted(set(names) ^ set(model.names))
            raise ValueError(f"its {what} model was fitted on other features than this code computes "
                             f"(differing: {', '.join(extra) or 'their order'})")
    return scorer
