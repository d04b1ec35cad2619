"""Constrained tag decoding (model.benchmark.decoding) on hand-built log-probabilities."""
import numpy as np
import pytest

from model.benchmark.decoding import allowed_transitions, decode_window, viterbi
from model.benchmark.metrics import ner_scores

BIO = ["O", "B-PER", "I-PER", "B-LOC", "I-LOC"]


def _logp(rows, labels):
    """Log-probabilities from per-position {tag: prob} dicts, the rest of the mass spread evenly."""
    out = []
    for r in rows:
        rest = (1 - sum(r.values())) / (len(labels) - len(r))
        out.append([np.log(r.get(t, rest)) for t in labels])
    return np.array(out)


def _tags(ids, labels):
    return [labels[i] for i in ids]


def test_bio_masks_forbid_an_entity_that_starts_inside():
    start, trans, end = allowed_transitions(BIO)
    i = {t: k for k, t in enumerate(BIO)}
    assert not start[i["I-PER"]] and start[i["B-PER"]] and start[i["O"]] and end.all()
    assert trans[i["B-PER"], i["I-PER"]] and trans[i["I-PER"], i["I-PER"]]
    assert not trans[i["O"], i["I-PER"]] and not trans[i["B-LOC"], i["I-PER"]] and not trans[i["I-LOC"], i["I-PER"]]


def test_viterbi_repairs_what_argmax_breaks():
    # argmax: O I-PER I-PER O — seqeval would count an entity whose B was missed; the repair is B-PER I-PER I-PER
    lp = _logp([{"O": 0.55, "B-PER": 0.4}, {"I-PER": 0.9}, {"I-PER": 0.9}, {"O": 0.9}], BIO)
    start, trans, end = allowed_transitions(BIO)
    assert _tags(lp.argmax(-1), BIO) == ["O", "I-PER", "I-PER", "O"]
    best = _tags(viterbi(lp, trans, start, end), BIO)
    assert best == ["B-PER", "I-PER", "I-PER", "O"]
    # an I of another type after B-LOC becomes the type the chain allows
    lp = _logp([{"B-LOC": 0.9}, {"I-PER": 0.5, "I-LOC": 0.45}, {"O": 0.9}], BIO)
    assert _tags(viterbi(lp, trans, start, end), BIO) == ["B-LOC", "I-LOC", "O"]
    # mid-sentence windows may start inside an entity
    lp = _logp([{"I-PER": 0.9}, {"O": 0.9}], BIO)
    assert _tags(viterbi(lp, trans, None, None), BIO) == ["I-PER", "O"]
    assert viterbi(np.zeros((0, len(BIO))), trans) == []


def test_bmes_chain_and_its_end_rule():
    labels = ["B", "M", "E", "S"]
    start, trans, end = allowed_transitions(labels)
    lp = _logp([{"B": 0.9}, {"S": 0.6, "E": 0.35}, {"B": 0.8}], labels)
    assert _tags(lp.argmax(-1), labels) == ["B", "S", "B"]
    assert _tags(viterbi(lp, trans, start, end), labels) == ["B", "E", "S"]
    with pytest.raises(ValueError, match="no tag sequence"):
        viterbi(lp[:1], trans, np.array([False] * 4), None)


def test_decode_window_skips_pieces_without_chars_and_only_the_first_window_has_the_start_rule():
    lp = _logp([{"O": 0.6, "B-PER": 0.35}, {"O": 0.9}, {"I-PER": 0.9}, {"O": 0.9}], BIO)
    # piece 1 covers no char (a bare "▁"): the chain runs 0 -> 2, and piece 2 continues piece 0's entity
    ex = {"start": 0, "n": 4, "n_tokens": 4, "token_spans": [[0, 1], [1, 1], [1, 3], [3, 4]]}
    assert _tags(decode_window(lp, ex, allowed_transitions(BIO)), BIO) == ["B-PER", "O", "I-PER", "O"]
    ex_mid = dict(ex, start=40)
    lp2 = _logp([{"I-PER": 0.9}, {"O": 0.9}, {"O": 0.9}, {"O": 0.9}], BIO)
    assert _tags(decode_window(lp2, ex_mid, allowed_transitions(BIO)), BIO)[0] == "I-PER"
    assert _tags(decode_window(lp2, ex, allowed_transitions(BIO)), BIO)[0] != "I-PER"
    # flat tag sets (POS) decode to the argmax
    pos = ["NOUN", "VERB", "ADJ"]
    lp3 = np.log(np.array([[0.2, 0.7, 0.1], [0.5, 0.3, 0.2]]))
    assert decode_window(lp3, {"start": 0, "n": 2}, allowed_transitions(pos)) == [1, 0]


def test_constrained_decoding_never_scores_below_argmax_on_a_broken_entity():
    gold = [["B-PER", "I-PER", "I-PER", "O"]]
    lp = _logp([{"O": 0.55, "B-PER": 0.4}, {"I-PER": 0.9}, {"I-PER": 0.9}, {"O": 0.9}], BIO)
    start, trans, end = allowed_transitions(BIO)
    arg = [_tags(lp.argmax(-1), BIO)]
    fixed = [_tags(viterbi(lp, trans, start, end), BIO)]
    assert ner_scores(gold, arg)["f1"] == 0.0 and ner_scores(gold, fixed)["f1"] == 1.0
