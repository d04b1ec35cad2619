"""Answers with sources (SPEC §9): extractive answers over the hybrid search, a learned span scorer, the
evaluation on NCPQA and the answer page. A plain library (no Prefect).

    from answers import Answerer
    Answerer("data").answer("什么是数据基础制度体系？", k=3)
"""
from answers.answer import AnswerConfig, Answerer, AnswerInputError, check_question  # noqa: F401
from answers.scorer import AnswerScorer, ScorerMissingError  # noqa: F401
