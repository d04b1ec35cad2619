"""Benchmark metrics (SPEC §10): word F1 for CWS (words from BMES tags), accuracy for POS, span-level micro F1
for NER (seqeval, CoNLL rules), accuracy and macro F1 for DC/SA/SPM (scikit-learn)."""
from __future__ import annotations

from typing import Sequence


def bmes_words(tags: Sequence[str]) -> list[tuple[int, int]]:
    """Word spans ``(start, end)`` (end exclusive) of a BMES tag sequence. A word ends at ``E``/``S`` or before a
    ``B``/``S`` that follows an open word; an ill-formed sequence (``M`` first, ``B`` at the end) still cuts
    the chars into words, so every char lies in exactly one span."""
    spans, start = [], 0
    for i, t in enumerate(tags):
        if t in ("B", "S") and i > start:
            spans.append((start, i))
            start = i
        if t in ("E", "S"):
            spans.append((start, i + 1))
            start = i + 1
    if start < len(tags):
        spans.append((start, len(tags)))
    return spans


def words_to_bmes(words: Sequence[str]) -> list[str]:
    """BMES tags of a segmentation: ``S`` for a one-char word, else ``B M… E``."""
    out: list[str] = []
    for w in words:
        out += ["S"] if len(w) == 1 else ["B"] + ["M"] * (len(w) - 2) + ["E"]
    return out


def cws_scores(gold: Sequence[Sequence[str]], pred: Sequence[Sequence[str]]) -> dict:
    """Word precision, recall and F1 over sentences: a predicted word is right iff its span is a gold word's
    (the SIGHAN scoring). ``gold``/``pred``: BMES tags per sentence, same lengths.

    Raises:
        ValueError: a sentence's gold and predicted tags differ in length.
    """
    hit = n_pred = n_gold = 0
    for g, p in zip(gold, pred, strict=True):
        if len(g) != len(p):
            raise ValueError(f"gold has {len(g)} tags, prediction {len(p)}")
        gs, ps = set(bmes_words(g)), set(bmes_words(p))
        hit += len(gs & ps)
        n_pred += len(ps)
        n_gold += len(gs)
    prec, rec = hit / max(n_pred, 1), hit / max(n_gold, 1)
    return {"precision": prec, "recall": rec, "f1": 2 * prec * rec / (prec + rec) if prec + rec else 0.0}


def tag_accuracy(gold: Sequence[Sequence[str]], pred: Sequence[Sequence[str]]) -> dict:
    """Share of tags (POS: words) predicted right, over all sentences.

    Raises:
        ValueError: a sentence's gold and predicted tags differ in length.
    """
    hit = n = 0
    for g, p in zip(gold, pred, strict=True):
        if len(g) != len(p):
            raise ValueError(f"gold has {len(g)} tags, prediction {len(p)}")
        hit += sum(a == b for a, b in zip(g, p))
        n += len(g)
    return {"accuracy": hit / max(n, 1)}


def ner_scores(gold: Sequence[Sequence[str]], pred: Sequence[Sequence[str]]) -> dict:
    """Entity-span micro precision, recall and F1 of BIO tags (seqeval's default CoNLL evaluation)."""
    from seqeval.metrics import f1_score, precision_score, recall_score

    gold, pred = [list(g) for g in gold], [list(p) for p in pred]
    return {"precision": float(precision_score(gold, pred, zero_division=0)),
            "recall": float(recall_score(gold, pred, zero_division=0)),
            "f1": float(f1_score(gold, pred, zero_division=0))}


def classification_scores(gold: Sequence, pred: Sequence) -> dict:
    """Accuracy and macro F1 (mean over the gold and predicted classes of the per-class F1)."""
    from sklearn.metrics import accuracy_score, f1_score

    gold, pred = list(gold), list(pred)
    if not gold:
        return {"accuracy": 0.0, "macro_f1": 0.0}
    return {"accuracy": float(accuracy_score(gold, pred)),
            "macro_f1": float(f1_score(gold, pred, average="macro", zero_division=0))}


def task_scores(kind: str, name: str, gold, pred) -> dict:
    """The metrics of a task: CWS word P/R/F1, POS accuracy, NER span P/R/F1, else accuracy + macro F1."""
    if name == "cws":
        return cws_scores(gold, pred)
    if name == "ner":
        return ner_scores(gold, pred)
    if kind in ("token", "word"):
        return tag_accuracy(gold, pred)
    return classification_scores(gold, pred)


def tag_scheme(labels: Sequence[str]) -> str:
    """How char tags combine into a token's tag and spread back (SPEC §6, token labels of a SentencePiece body):
    ``bmes`` (CWS), ``bio`` (NER: ``B-X``/``I-X``/``O``) or ``first`` (any other tag set, e.g. POS on a word's
    first char)."""
    if set(labels) <= {"B", "M", "E", "S"}:
        return "bmes"
    if all(t == "O" or t[:2] in ("B-", "I-") for t in labels):
        return "bio"
    return "first"


def token_tag(char_tags: Sequence[str | None], scheme: str) -> str | None:
    """The tag of a token from the tags of the chars it covers (None: nothing to learn there). ``bmes``: S if it
    starts and ends a word, B if it starts one, E if it ends one, else M; ``bio``: its first char's tag;
    ``first``: the first char tag that is set (the word starting inside the token), else None.

    Raises:
        ValueError: an empty ``char_tags`` or an unknown scheme.
    """
    if not char_tags:
        raise ValueError("a token covers no char: it has no tag")
    if scheme == "bmes":
        starts, ends = char_tags[0] in ("B", "S"), char_tags[-1] in ("E", "S")
        return "S" if starts and ends else "B" if starts else "E" if ends else "M"
    if scheme == "bio":
        return char_tags[0]
    if scheme == "first":
        return next((t for t in char_tags if t is not None), None)
    raise ValueError(f"unknown tag scheme {scheme!r} (bmes, bio, first)")


def char_tags(tag: str, k: int, scheme: str) -> list[str]:
    """The tags of the ``k`` chars of a token tagged ``tag`` (inverse of :func:`token_tag` where the token lies
    inside one word): ``bmes`` S -> B M… E (a one-char token: S), B -> B M…, E -> M… E, M -> M…; ``bio`` B-X ->
    B-X I-X…, else ``tag`` on every char; ``first``: ``tag`` on every char.

    Raises:
        ValueError: ``k`` < 1 or an unknown scheme.
    """
    if k < 1:
        raise ValueError(f"a token covers {k} chars")
    if scheme == "bmes":
        if k == 1:
            return [tag]
        head = "B" if tag in ("B", "S") else "M"
        tail = "E" if tag in ("E", "S") else "M"
        return [head] + ["M"] * (k - 2) + [tail]
    if scheme == "bio":
        return [tag] + ([f"I-{tag[2:]}"] if tag.startswith("B-") else [tag]) * (k - 1)
    if scheme == "first":
        return [tag] * k
    raise ValueError(f"unknown tag scheme {scheme!r} (bmes, bio, first)")
