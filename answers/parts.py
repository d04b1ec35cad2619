"""The answer stage's serving parts, declared once (SPEC §9; :mod:`retrieval.serving_parts`): the sentence
cross-encoder (``answer_reranker``), the reader (``answer_scorer``: the learned span scorer, the first
:class:`answers.reader.Reader`) and the neural span reader (``span_reader``, :mod:`answers.span_reader`). The
first two's loaders are here (the span reader's in its module); the scorer's fit on a question set is
:func:`answers.stages.scorer_fit`.
"""
from __future__ import annotations

from pathlib import Path

from retrieval.serving_parts import ServingPart

def load_scorer(bundle, path: Path):
    """The version's answer scorer (:class:`~answers.scorer.AnswerScorer`) from its checked file.

    Raises:
        ValueError: the file is not a scorer of this code's features."""
    from answers.scorer import parse_scorer

    return parse_scorer(path.read_text(encoding="utf-8"), f"the answer scorer of index {bundle.version}")


def load_answer_reranker(bundle, path: Path):
    """The version's answer cross-encoder (:class:`retrieval.cross_encoder.CrossEncoder` on its pinned encoder).

    Raises:
        PartError: its weights changed since publication. CrossEncoderMismatchError: another encoder's."""
    from retrieval.cross_encoder import load_cross_encoder

    return load_cross_encoder(path, bundle.retriever.dense.encoder, bundle.model_id)


ANSWER_RERANKER_PART = ServingPart("answer_reranker", "reader", "answer-reranker.json", setting="answer_reranker",
                                   pins=("encoder_model_id",), load="answers.parts:load_answer_reranker")
ANSWER_SCORER_PART = ServingPart("answer_scorer", "reader", "answer-scorer.json", setting="answer_scorer",
                                 fallback_setting="answer_scorer_fallback", pins=("segmenter",),
                                 pins_if_named=("encoder_model_id", "answer_reranker"),
                                 fit="answers.stages:scorer_fit", fit_settings=("answer_questions",),
                                 record="answers.answer:reader_record", load="answers.parts:load_scorer")
# the neural span reader (answers.span_reader): answers in place of the scorer where a version holds it
SPAN_READER_PART = ServingPart("span_reader", "reader", "span-reader.json", setting="span_reader",
                               pins=("encoder_model_id",), load="answers.span_reader:load_span_reader")
PARTS = (ANSWER_RERANKER_PART, ANSWER_SCORER_PART, SPAN_READER_PART)  # the cross-encoder first: a scorer may pin it
