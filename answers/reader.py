"""The reader role of a serving index version (SPEC §9): what turns a question's prepared candidates
(:class:`~answers.features.Prepared`: the searched, grouped and featurised documents) into ranked answers.

A :class:`Reader` is one small protocol; :class:`ScorerReader` (the learned span scorer,
:class:`~answers.scorer.AnswerScorer`, and the sentence cross-encoder whose scores it may read) is the first.
A second reader is one module implementing it, one :class:`~retrieval.serving_parts.ServingPart` of role
``reader`` whose loader returns it, one test.
"""
from __future__ import annotations

from typing import Protocol, runtime_checkable

import numpy as np

from answers.decode import mbr_choice


@runtime_checkable
class Reader(Protocol):
    """Ranks a question's candidate spans.

    ``threshold``: the calibrated score under which the stage says "no answer"; ``reranker``: the model whose
    sentence scores the candidates must carry (:func:`answers.answer.prepare` ``reranker``), or None;
    ``read(question, prep, k, passage_chars)``: the best span of each of at most ``k`` documents, best first,
    as :class:`~answers.render.Answer` records (``passage_chars`` of context each side)."""

    threshold: float
    reranker: object | None

    def read(self, question: str, prep, k: int, passage_chars: int = 150) -> list: ...


class ScorerReader:
    """The learned span scorer as a :class:`Reader` (:func:`answers.answer.rank_answers`): ``scorer`` an
    :class:`~answers.scorer.AnswerScorer`, ``reranker`` the version's answer cross-encoder when the scorer
    reads its scores (else None), ``version`` stamped into every answer."""

    def __init__(self, scorer, reranker=None, version: str | None = None):
        self.scorer, self.reranker, self.version = scorer, reranker, version

    @property
    def threshold(self) -> float:
        return float(self.scorer.threshold)

    def read(self, question: str, prep, k: int, passage_chars: int = 150) -> list:
        """The best span of each document, best first (at most ``k``), as :class:`~answers.render.Answer` s."""
        return read_answers(prep, self.scorer, k, passage_chars, self.version)


def passage(text: str, start: int, end: int, chars: int) -> tuple[int, int]:
    """(start, end) of the passage shown around ``text[start:end]``: ``chars`` on each side, widened to the
    nearest sentence or line boundary within that reach."""
    a = max(0, start - chars)
    cut = max(text.rfind(m, a, start) for m in "。！？；\n")
    a = cut + 1 if cut >= a else a
    b = min(len(text), end + chars)
    ends = [i for i in (text.find(m, end, b) for m in "。！？；\n") if i >= 0]
    b = max(ends) + 1 if ends else b
    return a, b


def read_answers(prep: Prepared, scorer, k: int, passage_chars: int = 150, version: str | None = None) -> list:
    """The best span of each document, best first (at most ``k``), as :class:`~answers.render.Answer` records:
    each document's span is the scorer's minimum-Bayes-risk choice among its spans (:mod:`answers.decode`; the
    argmax when the scorer's ``mbr_temperature`` is 0), its raw score that of the document's best-scored span
    (documents are ranked and calibrated by it); ``version``: the index version stamped into each."""
    from answers.render import Answer

    if not prep.spans:
        return []
    p_doc, raw = scorer.raw_scores(prep.doc_x, prep.span_x, prep.span_doc)
    best = {}  # document -> (its level: its best span's raw score, its spans)
    for g, d in enumerate(prep.docs):
        idx = np.flatnonzero(prep.span_doc == g)
        if not d.extra and len(idx):
            best[g] = (float(raw[idx].max()), idx)
    out = []
    for g in sorted(best, key=lambda g: -best[g][0])[:k]:  # stable: ties keep the retrieval order
        d, (level, idx) = prep.docs[g], best[g]
        pick = idx[mbr_choice([prep.spans[i].start for i in idx], [prep.spans[i].end for i in idx], raw[idx],
                              scorer.mbr_temperature)]
        sp = prep.spans[pick]
        pa, pb = passage(d.text, sp.start, sp.end, passage_chars)
        out.append(Answer(d.text[sp.start:sp.end], float(scorer.calibrate(level)), sp.start, sp.end, d.doc_id,
                          **{c: d.meta.get(c) for c in ("external_id", "title", "url", "source", "pubtime")},
                          passage=d.text[pa:pb], version=version, raw_score=level, doc_score=float(p_doc[g]),
                          passage_start=pa, passage_end=pb, kind=sp.kind, doc_rank=g + 1))
    return out
