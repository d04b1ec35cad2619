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
    """Add ``doc_id`` (the pipeline's id of the question's document), ``gold_start``/``gold_end`` (the answer
    located in its cleaned text, whitespace ignored, the occurrence nearest the original offset; -1 when it is
    not there) and ``gold_via`` (``id``; ``duplicate`` when cleaning dropped the document as a duplicate and
    the answer of at least 8 chars was found in exactly one kept document, which becomes the gold; ``none``)."""
    ext_to_doc = {m.get("external_id"): d for d, m in store.meta.items() if m.get("external_id")}
    doc_ids, starts, ends, via = [], [], [], []
    for r in questions.itertuples(index=False):
        d = ext_to_doc.get(r.ext_doc)
        text = store.text.get(d) if d else None
        s, e = find_span(text, r.answer, r.answer_start) if text else (-1, -1)
        via.append("id" if d else "none")
        if d is None and len("".join(r.answer.split())) >= 8:
            found = [(dd, find_span(t, r.answer, r.answer_start)) for dd, t in store.text.items()
                     if "".join(r.answer.split())[:8] in "".join(t.split())]
            found = [(dd, se) for dd, se in found if se[0] >= 0]
            if len(found) == 1:
                d, (s, e) = found[0]
                via[-1] = "duplicate"
        doc_ids.append(d)
        starts.append(s)
        ends.append(e)
    return questions.assign(doc_id=doc_ids, gold_start=starts, gold_end=ends, gold_via=via)


def find_span(text: str, answer: str, near: int) -> tuple[int, int]:
    """(start, end) of ``answer`` in ``text`` ignoring whitespace on both sides (cleaning collapses and drops
    spaces), the occurrence nearest ``near``; (-1, -1) when absent."""
    keep = [i for i, c in enumerate(text) if not c.isspace()]
    flat = "".join(text[i] for i in keep)
    ans = "".join(c for c in answer if not c.isspace())
    hits, i = [], flat.find(ans) if ans else -1
    while i >= 0:
        hits.append(i)
        i = flat.find(ans, i + 1)
    if not hits:
        return -1, -1
    h = min(hits, key=lambda x: abs(keep[x] - near))
    return keep[h], keep[h + len(ans) - 1] + 1


def split_by_document(questions: pd.DataFrame, test_share: float = 0.3, seed: int = 13) -> pd.Series:
    """``train``/``test`` per question: the shared documents (``ext_doc``) are shuffled with ``seed`` and the
    first ``test_share`` of them hold the test questions, so no test question's document is trained on. With
    ``doc_id`` located (:func:`locate_gold`), a test question whose cleaned document also answers a training
    question (a shared document dropped as a duplicate of one on the other side) moves to training, with every
    other question of its shared document."""
    docs = np.array(sorted(questions["ext_doc"].unique()))
    rng = np.random.default_rng(seed)
    rng.shuffle(docs)
    test = set(docs[:int(round(test_share * len(docs)))])
    split = questions["ext_doc"].map(lambda d: "test" if d in test else "train")
    if "doc_id" in questions and len(questions):
        located = questions["doc_id"].map(lambda d: isinstance(d, str)).astype(bool)
        trained = set(questions.loc[located & (split == "train"), "doc_id"])
        moved = set(questions.loc[located & (split == "test") & questions["doc_id"].isin(trained), "ext_doc"])
        split[questions["ext_doc"].isin(moved)] = "train"
    return split
