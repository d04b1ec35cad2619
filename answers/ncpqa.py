"""The shared NCPQA questions (``../shared/qa/``, README there) against a data dir that imported their
documents: gold documents and answer spans located in the cleaned text, and a seeded split by document."""
from __future__ import annotations

import os

import numpy as np
import pandas as pd


def load_questions(path: str | os.PathLike) -> pd.DataFrame:
    """qid, question, answer, ext_doc (the question's document id in the shared file), answer_start, answer_end."""
    df = pd.read_json(path, lines=True, dtype={"qid": str, "doc_id": str})
    return df.rename(columns={"doc_id": "ext_doc"})[["qid", "question", "answer", "ext_doc", "answer_start",
                                                     "answer_end"]]


def locate_gold(questions: pd.DataFrame, store) -> pd.DataFrame:
    """Add ``doc_id`` (the pipeline's id of the question's document, None when cleaning dropped it),
    ``gold_start``/``gold_end`` (the answer located in the cleaned text: the occurrence nearest the original
    offset scaled to the cleaned length; -1 when it is not found verbatim)."""
    ext_to_doc = {m.get("external_id"): d for d, m in store.meta.items() if m.get("external_id")}
    doc_ids, starts, ends = [], [], []
    for r in questions.itertuples(index=False):
        d = ext_to_doc.get(r.ext_doc)
        text = store.text.get(d) if d else None
        s = _find(text, r.answer.strip(), r.answer_start) if text else -1
        doc_ids.append(d)
        starts.append(s)
        ends.append(s + len(r.answer.strip()) if s >= 0 else -1)
    return questions.assign(doc_id=doc_ids, gold_start=starts, gold_end=ends)


def _find(text: str, answer: str, near: int) -> int:
    hits, i = [], text.find(answer)
    while i >= 0 and answer:
        hits.append(i)
        i = text.find(answer, i + 1)
    return min(hits, key=lambda h: abs(h - near)) if hits else -1


def split_by_document(questions: pd.DataFrame, test_share: float = 0.3, seed: int = 13) -> pd.Series:
    """``train``/``test`` per question: the shared documents (``ext_doc``) are shuffled with ``seed`` and the
    first ``test_share`` of them hold the test questions, so no test question's document is trained on."""
    docs = np.array(sorted(questions["ext_doc"].unique()))
    rng = np.random.default_rng(seed)
    rng.shuffle(docs)
    test = set(docs[:int(round(test_share * len(docs)))])
    return questions["ext_doc"].map(lambda d: "test" if d in test else "train")
