"""Minimum-Bayes-risk choice of the answer span (SPEC §9, :mod:`answers.decode`)."""
from __future__ import annotations

import numpy as np
import pytest

from answers.decode import mbr_choice, range_f1
from answers.metrics import char_f1


def test_range_f1_is_the_char_f1_of_the_ranges():
    spans = [(0, 10), (5, 20), (12, 30), (20, 25), (0, 0)]
    f = range_f1([s for s, _ in spans], [e for _, e in spans])
    assert f.shape == (5, 5) and np.allclose(f, f.T)
    assert np.allclose(np.diag(f)[:4], 1.0) and f[4, 4] == 0.0 and f[0, 3] == 0.0
    # distinct characters: the ranges' char-F1 is the metric's
    uniq = "".join(chr(0x4E00 + i) for i in range(30))
    for i, (a, b) in enumerate(spans[:4]):
        for j, (c, d) in enumerate(spans[:4]):
            assert f[i, j] == pytest.approx(char_f1(uniq[a:b], uniq[c:d]))


def test_mbr_picks_the_span_the_mass_agrees_on_and_zero_temperature_is_argmax():
    # one long window scored a little above three spans that share a short core
    starts, ends = [0, 40, 42, 40], [100, 50, 50, 48]
    scores = [1.0, 0.9, 0.9, 0.9]
    assert mbr_choice(starts, ends, scores, 0.0) == 0
    assert mbr_choice(starts, ends, scores, 1.0) in (1, 2, 3)
    # a clear winner stays the choice at a low temperature
    assert mbr_choice(starts, ends, [5.0, 0.0, 0.0, 0.0], 0.25) == 0
    # only the top_n best-scored spans take part
    assert mbr_choice(starts, ends, scores, 1.0, top_n=1) == 0
    with pytest.raises(ValueError, match="equal, non-zero"):
        mbr_choice([], [], [], 1.0)
    with pytest.raises(ValueError, match="equal, non-zero"):
        mbr_choice([0, 1], [2, 3], [1.0], 1.0)


def test_scorer_temperature_is_saved_and_checked():
    from answers.scorer import AnswerScorer, LinearModel

    m = LinearModel(["a"], [0.0], [1.0], [1.0], 0.0)
    s = AnswerScorer(m, m, mbr_temperature=0.5)
    assert AnswerScorer.from_json(s.to_json()).mbr_temperature == 0.5
    for bad in (-1.0, float("nan"), float("inf")):
        with pytest.raises(ValueError, match="mbr_temperature"):
            AnswerScorer(m, m, mbr_temperature=bad)
