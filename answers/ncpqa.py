"""The shared NCPQA questions (``../shared/qa/``, README there) against a data dir that imported their
documents: gold documents and answer spans located in the cleaned text, and a seeded split by document."""
from __future__ import annotations

import os
import re
import unicodedata
from pathlib import Path

import numpy as np
import pandas as pd

from answers.metrics import counted

_DUPLICATE_OF = re.compile(r"^duplicate of (\S+)$")


QUESTION_FIELDS = ("qid", "question", "answer", "doc_id", "answer_start", "answer_end")


def read_question_lines(path: str | os.PathLike, fmt: str = "") -> pd.DataFrame:
    """A question file's JSON Lines as a frame, ``qid`` and ``doc_id`` read as strings.

    Raises:
        FileNotFoundError: no such file. ValueError: naming the file (and ``fmt``): not UTF-8 JSON Lines (a
            leading byte order mark is allowed).
    """
    if not Path(path).is_file():
        raise FileNotFoundError(f"question file {path} not found")
    import io

    try:  # utf-8-sig: a byte order mark before the first line is the file's
        text = Path(path).read_text(encoding="utf-8-sig")
        return pd.read_json(io.StringIO(text), lines=True, dtype={"qid": str, "doc_id": str})
    except RecursionError:
        raise ValueError(f"question file {path} is not JSON Lines{fmt} (nested too deep)") from None
    except ValueError as exc:
        raise ValueError(f"question file {path} is not JSON Lines{fmt} ({str(exc)[:120]})") from None


def load_questions(path: str | os.PathLike) -> pd.DataFrame:
    """qid, question, answer, ext_doc (the question's document id in the shared file), answer_start, answer_end,
    from a question file in the NCPQA format (JSON Lines with :data:`QUESTION_FIELDS`, ``../shared/qa/README.md``).

    Raises:
        FileNotFoundError: no such file. ValueError: naming the file: not JSON Lines, empty, or a field missing.
    """
    df = read_question_lines(path, " in the NCPQA format")
    if df.empty:
        raise ValueError(f"question file {path} holds no question")
    missing = [c for c in QUESTION_FIELDS if c not in df.columns]
    if missing:
        raise ValueError(f"question file {path}: no field {', '.join(missing)} (the NCPQA format has "
                         f"{', '.join(QUESTION_FIELDS)})")
    return df.rename(columns={"doc_id": "ext_doc"})[["qid", "question", "answer", "ext_doc", "answer_start",
                                                     "answer_end"]]


def duplicate_targets(data_dir: str | os.PathLike) -> dict[str, str]:
    """``external id -> kept doc_id`` for every imported document that cleaning dropped as a duplicate (SPEC §3),
    read from the data dir's lineage: ``documents`` (the imported ids) and ``rejects`` (``duplicate of ID``),
    chains followed to the document that was kept. Empty when either table is missing."""
    from storage import read_table

    data_dir = Path(data_dir)
    if not all((data_dir / t / "manifest.json").is_file() for t in ("documents", "rejects")):
        return {}
    rej = read_table(data_dir / "rejects", ["doc_id", "reason", "detail"])
    kept_of = {}
    for r in rej.itertuples(index=False):
        m = _DUPLICATE_OF.match(str(r.detail or ""))
        if str(r.reason).endswith("_duplicate") and m:
            kept_of[r.doc_id] = m.group(1)
    out = {}
    docs = read_table(data_dir / "documents", ["doc_id", "external_id"])
    for d, ext in zip(docs["doc_id"], docs["external_id"]):
        seen, k = {d}, kept_of.get(d)
        while k in kept_of and kept_of[k] not in seen:  # a duplicate of a duplicate: follow to the kept one
            seen.add(k)
            k = kept_of[k]
        if k and isinstance(ext, str):
            out[ext] = k
    return out


def locate_gold(questions: pd.DataFrame, store, duplicates: dict[str, str] | None = None) -> pd.DataFrame:
    """Add ``doc_id`` (the pipeline's id of the question's document), ``gold_start``/``gold_end`` (the answer
    located in its cleaned text by :func:`find_span`, the occurrence nearest the original offset; -1 when it is
    not there) and ``gold_via``: ``id``; ``duplicate`` when cleaning dropped the document as a duplicate, and
    the gold is then the document it was a duplicate of (``duplicates``: :func:`duplicate_targets`) or, where
    that lineage says nothing, the one kept document that holds an answer of at least 8 chars; ``none``."""
    ext_to_doc = {m.get("external_id"): d for d, m in store.meta.items() if m.get("external_id")}
    duplicates = duplicates or {}
    flat = {}  # doc_id -> its text as find_span reads it, built once
    doc_ids, starts, ends, via = [], [], [], []
    for r in questions.itertuples(index=False):
        d = ext_to_doc.get(r.ext_doc)
        kind = "id" if d else "none"
        if d is None and duplicates.get(r.ext_doc) in store.text:
            d, kind = duplicates[r.ext_doc], "duplicate"
        s, e = _find(flat, store, d, r.answer, r.answer_start) if d else (-1, -1)
        if d is None and len(counted_text(r.answer)[0]) >= 8:
            found = [(dd, _find(flat, store, dd, r.answer, r.answer_start)) for dd in store.text]
            found = [(dd, se) for dd, se in found if se[0] >= 0]
            if len(found) == 1:
                d, (s, e) = found[0]
                kind = "duplicate"
        doc_ids.append(d)
        starts.append(s)
        ends.append(e)
        via.append(kind)
    return questions.assign(doc_id=doc_ids, gold_start=starts, gold_end=ends, gold_via=via)


def _find(flat: dict, store, doc_id: str, answer: str, near: int) -> tuple[int, int]:
    if doc_id not in flat:
        flat[doc_id] = counted_text(store.text[doc_id])
    return find_span(store.text[doc_id], answer, near, flat[doc_id])


def counted_text(text: str) -> tuple[str, list[int]]:
    """(the characters the answer metrics count, each NFKC-normalised and lower-cased: whitespace and
    punctuation dropped as :func:`answers.metrics.normalize` drops them; the offset in ``text`` of each)."""
    chars, at = [], []
    for i, c in enumerate(text):
        for n in unicodedata.normalize("NFKC", c).lower():
            if counted(n):
                chars.append(n)
                at.append(i)
    return "".join(chars), at


def find_span(text: str, answer: str, near: int, flat: tuple[str, list[int]] | None = None) -> tuple[int, int]:
    """(start, end) of ``answer`` in ``text`` compared as the answer metrics compare them (:func:`counted_text`:
    cleaning collapses spaces and may turn full-width punctuation half-width or back), the occurrence nearest
    ``near``; the span runs from the answer's first counted character to its last. (-1, -1) when absent or
    when the answer holds no counted character. ``flat``: ``counted_text(text)`` when already built."""
    chars, keep = flat if flat is not None else counted_text(text)
    ans = counted_text(answer)[0]
    hits, i = [], chars.find(ans) if ans else -1
    while i >= 0:
        hits.append(i)
        i = chars.find(ans, i + 1)
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
