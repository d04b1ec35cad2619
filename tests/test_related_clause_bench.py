"""bench/related_clause_bench.py: which laws of the corpus a regulation's first ``根据《…》`` clause names."""
from __future__ import annotations

import sys
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent.parent / "bench"))

from related_clause_bench import clause_laws  # noqa: E402

LAWS = {"环境保护法": 0, "大气污染防治法": 1, "刑法": 2}


def test_the_clause_names_its_laws_in_order_with_or_without_the_state_prefix():
    text = ("第一条 为了防治大气污染，根据《中华人民共和国环境保护法》《大气污染防治法》和《某省条例》等法律、法规，"
            "结合本省实际，制定本条例。第二条 违反本条例的，依照《中华人民共和国刑法》处罚。")
    assert clause_laws(text, LAWS) == [0, 1]


def test_a_law_named_twice_counts_once_and_only_the_first_clause_is_read():
    text = "根据《刑法》和《中华人民共和国刑法》的规定，制定本解释。根据《环境保护法》，另行规定。"
    assert clause_laws(text, LAWS) == [2]


def test_no_clause_or_no_law_of_the_corpus_gives_nothing():
    assert clause_laws("为了规范管理，制定本办法。", LAWS) == []
    assert clause_laws("根据《某省条例》，制定本办法。", LAWS) == []
