"""Baselines that cannot learn from the encoder (SPEC §10), fitted on a task's train split only and scored on
its test split with the task's metrics:

- CWS: the project's offline HanLP dictionary segmenter (SPEC §4) and jieba, against the gold words (no
  training: dictionaries);
- POS: the most frequent train tag of each word (unseen words: the most frequent tag overall);
- NER: a linear-chain CRF (sklearn-crfsuite, L-BFGS, c1 0.1, c2 0.1) on char n-gram features (chars at
  offsets -2..2, bigrams at -1..1), and the majority tag (``O`` everywhere: F1 0);
- DC/SA: TF-IDF over char 1-2-grams + logistic regression;
- SPM: the char-overlap logistic regression of :mod:`model.baselines` (char Jaccard, BM25 both ways, lengths).
"""
from __future__ import annotations

import time
from collections import Counter, defaultdict
from typing import Callable

from model.benchmark.data import Splits
from model.benchmark.metrics import task_scores, words_to_bmes

CRF_MAX_ITER = 100


def cws_segmenter(splits: Splits, segmenter) -> dict:
    """Word P/R/F1 of a :class:`corpus.segment.Segmenter` on the test sentences.

    Raises:
        ValueError: the segmenter's words do not join back to a sentence (it dropped or changed chars).
    """
    sentences = ["".join(c) for c in splits.test["chars"]]
    pred = []
    for s, words in zip(sentences, segmenter.segment(sentences)):
        if "".join(words) != s.replace(" ", ""):
            raise ValueError(f"segmenter {segmenter.backend} changed the sentence {s[:30]!r}")
        pred.append(words_to_bmes(words))
    return task_scores("token", "cws", list(splits.test["tags"]), pred)


def pos_most_frequent(splits: Splits) -> dict:
    """Accuracy of tagging each test word with its most frequent train tag."""
    counts: dict[str, Counter] = defaultdict(Counter)
    overall: Counter = Counter()
    for words, tags in zip(splits.train["words"], splits.train["tags"]):
        for w, t in zip(words, tags):
            counts[w][t] += 1
            overall[t] += 1
    best = {w: c.most_common(1)[0][0] for w, c in counts.items()}
    top = overall.most_common(1)[0][0]
    pred = [[best.get(w, top) for w in words] for words in splits.test["words"]]
    return task_scores("word", "pos", list(splits.test["tags"]), pred)


def char_features(chars: list[str]) -> list[dict[str, str]]:
    """CRF features per char: the chars at offsets -2..2 and the bigrams at -1..1 (``<s>``/``</s>`` beyond)."""
    pad = ["<s>", "<s>"] + list(chars) + ["</s>", "</s>"]
    out = []
    for i in range(2, len(pad) - 2):
        f = {f"c{k}": pad[i + k] for k in (-2, -1, 0, 1, 2)}
        f.update({f"b{k}": pad[i + k] + pad[i + k + 1] for k in (-1, 0)})
        f["bias"] = "1"
        out.append(f)
    return out


def ner_crf(splits: Splits, max_iterations: int = CRF_MAX_ITER) -> dict:
    """Span micro P/R/F1 of a CRF on :func:`char_features` fitted on train."""
    import sklearn_crfsuite

    crf = sklearn_crfsuite.CRF(algorithm="lbfgs", c1=0.1, c2=0.1, max_iterations=max_iterations,
                               all_possible_transitions=True)
    crf.fit([char_features(c) for c in splits.train["chars"]], [list(t) for t in splits.train["tags"]])
    pred = crf.predict([char_features(c) for c in splits.test["chars"]])
    return task_scores("token", "ner", list(splits.test["tags"]), pred)


def majority_tag(splits: Splits) -> dict:
    """The task's metrics when every test char gets the most frequent train tag."""
    top = Counter(t for tags in splits.train["tags"] for t in tags).most_common(1)[0][0]
    pred = [[top] * len(t) for t in splits.test["tags"]]
    return task_scores(splits.task.kind, splits.task.name, list(splits.test["tags"]), pred)


def tfidf_lr(splits: Splits) -> dict:
    """Accuracy and macro F1 of TF-IDF (char 1-2-grams, sublinear tf) + logistic regression."""
    from sklearn.feature_extraction.text import TfidfVectorizer
    from sklearn.linear_model import LogisticRegression
    from sklearn.pipeline import make_pipeline

    clf = make_pipeline(TfidfVectorizer(analyzer="char", ngram_range=(1, 2), sublinear_tf=True, min_df=1),
                        LogisticRegression(max_iter=1000, C=4.0))
    clf.fit(list(splits.train["text"]), list(splits.train["label"]))
    return task_scores("seq", splits.task.name, list(splits.test["label"]), clf.predict(list(splits.test["text"])))


def pair_overlap_lr(splits: Splits) -> dict:
    """Accuracy and macro F1 of :func:`model.baselines.fit_overlap_lr` (labels as ints)."""
    from model.baselines import fit_overlap_lr

    def ints(df):
        return df.assign(label=df["label"].astype(int))

    predict = fit_overlap_lr(ints(splits.train))
    pred = [str(int(p)) for p in predict(ints(splits.test))]
    return task_scores("pair", "spm", list(splits.test["label"]), pred)


def majority_label(splits: Splits) -> dict:
    """Accuracy and macro F1 of the train split's majority label."""
    top = Counter(splits.train["label"]).most_common(1)[0][0]
    return task_scores("seq", splits.task.name, list(splits.test["label"]), [top] * len(splits.test))


def _cws(name: str) -> Callable[[Splits], dict]:
    def run(splits: Splits) -> dict:
        from corpus.segment import load_segmenter

        return cws_segmenter(splits, load_segmenter(name))
    return run


BASELINES: dict[str, dict[str, Callable[[Splits], dict]]] = {
    "cws": {"hanlp-dict": _cws("hanlp-dict"), "jieba": _cws("jieba")},
    "pos": {"most-frequent-tag": pos_most_frequent},
    "ner": {"crf-char-ngrams": ner_crf, "majority-tag": majority_tag},
    "dc": {"tfidf-lr": tfidf_lr, "majority": majority_label},
    "sa": {"tfidf-lr": tfidf_lr, "majority": majority_label},
    "spm": {"overlap-lr": pair_overlap_lr, "majority": majority_label},
}


def run_baselines(splits: Splits, log: Callable[[str], None] = print) -> list[dict]:
    """Every baseline of the task: one record per baseline with its test metrics and ``seconds``."""
    out = []
    for name, fn in BASELINES[splits.task.name].items():
        t0 = time.perf_counter()
        scores = fn(splits)
        secs = time.perf_counter() - t0
        log(f"{splits.task.name} baseline {name}: " + " ".join(f"{k} {v:.4f}" for k, v in scores.items()))
        out.append({"model": name, "scores": scores, "seconds": secs})
    return out


__all__ = ["BASELINES", "char_features", "cws_segmenter", "majority_label", "majority_tag", "ner_crf",
           "pair_overlap_lr", "pos_most_frequent", "run_baselines", "tfidf_lr"]
