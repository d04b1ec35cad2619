"""One evaluation harness: every evaluation set behind one loader protocol (:mod:`evaluation.sets`) and one
report writer (:mod:`evaluation.report`). A library: no Prefect import."""
from evaluation.report import long_rows, markdown, summary, write_report
from evaluation.sets import EvalSet, SetLoader, loader, read_questions, set_names

__all__ = ["EvalSet", "SetLoader", "loader", "read_questions", "set_names", "long_rows", "markdown", "summary",
           "write_report"]
