"""Search input is checked before anything loads (retrieval/query.py, flows/search.py)."""
from __future__ import annotations

import subprocess
import sys

import pytest

from retrieval.query import QueryError, QueryLimits, check_query
from tests.conftest import REPO


@pytest.mark.parametrize("query,k,match", [("", 5, "empty query"), ("   \n", 5, "empty query"),
                                           ("数据", 0, "between 1 and 100"), ("数据", 10**9, "between 1 and 100"),
                                           ("数" * 1001, 5, "over the limit of 1000")])
def test_bad_requests_are_clear_errors(query, k, match):
    with pytest.raises(QueryError, match=match):
        check_query(query, k)


def test_limits_are_configurable_and_good_queries_pass():
    assert check_query("  数据基础制度  ", 5) == "数据基础制度"
    assert check_query("数" * 50, 200, QueryLimits(max_k=200, max_chars=50)) == "数" * 50
    with pytest.raises(QueryError):
        check_query("数" * 51, 5, QueryLimits(max_chars=50))


@pytest.mark.parametrize("args", [["", "-k", "3"], ["数据", "-k", "0"], ["数据", "-k", str(10**9)],
                                  ["数" * 2000]])
def test_search_cli_refuses_bad_input_with_one_line_before_loading(tmp_path, args):
    res = subprocess.run([sys.executable, "-m", "flows.search", *args, "--data-dir", str(tmp_path / "none")],
                         cwd=REPO, capture_output=True, text=True, timeout=60)
    assert res.returncode == 2 and res.stdout == ""
    assert res.stderr.startswith("error:") and len(res.stderr.strip().splitlines()) == 1
