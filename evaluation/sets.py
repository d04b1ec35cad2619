"""The evaluation sets behind one loader protocol (SPEC §7 retrieval evaluation, §8 answers, §10 public sets).

Every set loads into an :class:`EvalSet`: its name, its kind, its splits as DataFrames, the pool searched when
there is one, the files read with their sha256 (the lineage a report names), the columns every split carries
and how the splits were made. Loaders (:class:`SetLoader`):

- ``ncpqa`` (answers): the NCPQA question file (``../shared/qa/ncpqa_questions.jsonl`` format: qid, question,
  answer, doc_id, answer_start, answer_end), with ``query`` and ``gold`` (list of document ids) added; given an
  index version's texts (``store``) the gold document and span are located in them
  (:func:`answers.ncpqa.locate_gold`) and the questions split by document (train/test,
  :func:`answers.ncpqa.split_by_document`), else one split ``all``.
- ``lecoqa`` (retrieval): LeCoQA-format questions (qid, question, gold_article_ids) with ``query`` and ``gold``
  added, split by gold-article set (:func:`retrieval.rerank_data.lecoqa_split`), over the statute pool
  (:func:`retrieval.qa_eval.load_pool`). Any question file with a ``doc_id`` gold (NCPQA) reads the same way
  (one gold document), so ``flows.qa_eval`` evaluates either against its pool.
- ``titles`` (known-item retrieval): document titles and citations of ``documents_clean`` as queries
  (:func:`retrieval.evaluate.read_queries`), one split ``test``.
- ``cws``, ``pos``, ``ner``, ``dc``, ``sa``, ``spm`` (public sets): :func:`model.benchmark.data.load_task`, its
  README fallback splits and overlap removal; the :class:`model.benchmark.data.Splits` kept as ``extra["splits"]``.

Every question split carries ``qid, query, gold``; loaders raise ``FileNotFoundError`` for a missing file and
``ValueError`` naming the file for one in the wrong format (the readers' own errors).
"""
from __future__ import annotations

import os
from dataclasses import dataclass, field
from pathlib import Path
from typing import Protocol

import pandas as pd

SHARED = Path(__file__).resolve().parents[2] / "shared"
QA = SHARED / "qa"
QUESTION_COLUMNS = ("qid", "query", "gold")


@dataclass(frozen=True)
class EvalSet:
    """One loaded evaluation set. ``splits``: split name -> rows; ``pool``: the documents searched (LeCoQA's
    statute articles, one row per indexed chunk) or None; ``sources``: file path -> sha256; ``columns``: what
    every split carries; ``note``: how the splits were made; ``extra``: the loader's own objects."""

    name: str
    kind: str
    splits: dict[str, pd.DataFrame]
    sources: dict[str, str]
    columns: tuple[str, ...]
    note: str = ""
    pool: pd.DataFrame | None = None
    extra: dict = field(default_factory=dict)

    def sizes(self) -> dict[str, int]:
        """Rows per split (and ``pool`` when there is one)."""
        out = {k: len(v) for k, v in self.splits.items()}
        return out | ({"pool": len(self.pool)} if self.pool is not None else {})

    def describe(self) -> dict:
        """What a report records of the set: name, kind, rows per split, sources with sha256, note."""
        return {"set": self.name, "kind": self.kind, "rows": self.sizes(), "sources": self.sources, "note": self.note}


class SetLoader(Protocol):
    """Loads one evaluation set: ``name``, ``kind`` and ``load(**options) -> EvalSet``."""

    name: str
    kind: str

    def load(self, **options) -> EvalSet: ...


def _sources(*paths: str | os.PathLike) -> dict[str, str]:
    from storage.hashing import file_sha256

    return {str(p): file_sha256(p) for p in paths if Path(p).is_file()}


def _with_query_gold(df: pd.DataFrame, gold: pd.Series) -> pd.DataFrame:
    return df.assign(query=df["question"], gold=gold)


@dataclass(frozen=True)
class NcpqaLoader:
    """NCPQA questions (module docstring); ``path`` defaults to the shared file."""

    path: str | os.PathLike = QA / "ncpqa_questions.jsonl"
    name: str = "ncpqa"
    kind: str = "answers"

    def load(self, store=None, duplicates: dict[str, str] | None = None, test_share: float | None = 0.3,
             seed: int = 13) -> EvalSet:
        """The questions; with ``store`` (an index version's :class:`answers.documents.DocumentStore`) the gold
        located in its texts (``gold`` then the pipeline's document id, ``[]`` where none) and the train/test
        split by document (``test_share``, ``seed``; None: one split ``all``)."""
        from answers.ncpqa import load_questions, locate_gold, split_by_document

        q = load_questions(self.path)
        q = _with_query_gold(q, q["ext_doc"].map(lambda d: [str(d)]))
        if store is None:
            return EvalSet(self.name, self.kind, {"all": q}, _sources(self.path), tuple(q.columns), "no split")
        q = locate_gold(q, store, duplicates)
        q["gold"] = q["doc_id"].map(lambda d: [d] if isinstance(d, str) else [])
        if test_share is None:
            return EvalSet(self.name, self.kind, {"all": q}, _sources(self.path), tuple(q.columns),
                           "no split; gold located in the texts")
        q["split"] = split_by_document(q, test_share, seed)
        note = f"split by document: {test_share:.0%} of documents test (seed {seed}); gold located in the texts"
        return EvalSet(self.name, self.kind, {s: q[q["split"] == s] for s in ("train", "test")} | {"all": q},
                       _sources(self.path), tuple(q.columns), note)


@dataclass(frozen=True)
class LecoqaLoader:
    """LeCoQA-format questions over a pool (module docstring); defaults: the shared train file and statutes."""

    questions: str | os.PathLike = QA / "lecoqa_train.jsonl"
    pool_file: str | os.PathLike | None = QA / "statutes.jsonl"
    name: str = "lecoqa"
    kind: str = "retrieval"

    def load(self, test_share: float | None = 0.2, seed: int = 13, pool_text: str = "title+article",
             max_questions: int | None = None) -> EvalSet:
        """Questions (first ``max_questions``) split train/test by gold-article set (``test_share``; None: one
        split ``all``), and the pool (None without ``pool_file``).

        Raises:
            ValueError: a split asked of a file without ``gold_article_ids``; the readers' errors.
        """
        from retrieval.qa_eval import load_pool

        q = read_questions(self.questions, max_questions)
        pool = load_pool(self.pool_file, pool_text) if self.pool_file else None
        files = _sources(self.questions, *([self.pool_file] if self.pool_file else []))
        if test_share is not None and "gold_article_ids" not in q.columns:
            raise ValueError(f"{self.questions}: a split by gold-article set needs gold_article_ids (LeCoQA); "
                             f"load with test_share=None for one split 'all'")
        if test_share is None:
            return EvalSet(self.name, self.kind, {"all": q}, files, tuple(q.columns), "no split", pool)
        from retrieval.rerank_data import lecoqa_split

        q = q.assign(split=lecoqa_split(q, test_share, seed))
        note = f"split by gold-article set: {test_share:.0%} of the sets test (seed {seed})"
        return EvalSet(self.name, self.kind, {s: q[q["split"] == s] for s in ("train", "test")} | {"all": q},
                       files, tuple(q.columns), note, pool)


def read_questions(path: str | os.PathLike, max_questions: int | None = None) -> pd.DataFrame:
    """A retrieval question file: its own columns plus ``query`` (the question) and ``gold`` (list of doc ids,
    from ``gold_article_ids`` (LeCoQA) or ``doc_id`` (NCPQA)); ``qid`` read as a string.

    Raises:
        FileNotFoundError: no such file. ValueError: naming the file: not JSON Lines, or no question / gold column.
    """
    from answers.ncpqa import read_question_lines

    df = read_question_lines(path)
    if max_questions:
        df = df.head(max_questions)
    if "question" not in df.columns:
        raise ValueError(f"question file {path}: no question column")
    if "gold_article_ids" in df.columns:
        gold = df["gold_article_ids"].map(lambda g: [str(x) for x in g])
    elif "doc_id" in df.columns:
        gold = df["doc_id"].map(lambda d: [str(d)])
    else:
        raise ValueError(f"{path}: questions need a gold_article_ids or a doc_id column")
    if "qid" not in df.columns:
        df = df.assign(qid=[str(i) for i in range(len(df))])
    return _with_query_gold(df, gold).reset_index(drop=True)


@dataclass(frozen=True)
class TitlesLoader:
    """Known-item queries: the titles and citations of a ``documents_clean`` table folder."""

    clean_dir: str | os.PathLike
    name: str = "titles"
    kind: str = "known-item"

    def load(self) -> EvalSet:
        """One split ``test``: query, doc_id, kind (title | citation), gold = [doc_id], qid = row number."""
        from retrieval.evaluate import read_queries

        q = read_queries(self.clean_dir)
        q = q.assign(qid=[str(i) for i in range(len(q))], gold=q["doc_id"].map(lambda d: [str(d)]))
        manifest = Path(self.clean_dir) / "manifest.json"
        return EvalSet(self.name, self.kind, {"test": q}, _sources(manifest), tuple(q.columns),
                       "every title and citation that names one document")


@dataclass(frozen=True)
class PublicLoader:
    """One public benchmark task (``name`` in :data:`model.benchmark.data.TASKS`), read from ``root`` (default
    ``../shared/benchmarks``)."""

    name: str
    root: str | os.PathLike | None = None

    @property
    def kind(self) -> str:
        from model.benchmark.data import TASKS

        return TASKS[self.name].kind

    def load(self, seed: int | None = None) -> EvalSet:
        """train/dev/test as :func:`model.benchmark.data.load_task` makes them (its fallback split ``seed``)."""
        from model.benchmark.data import DEFAULT_ROOT, SPLIT_SEED, load_task

        sp = load_task(self.name, self.root, SPLIT_SEED if seed is None else seed)
        folder = Path(self.root or DEFAULT_ROOT) / self.name
        files = _sources(*sorted(folder.glob("*"))) if folder.is_dir() else {}
        return EvalSet(self.name, self.kind, {"train": sp.train, "dev": sp.dev, "test": sp.test}, files,
                       tuple(sp.test.columns), sp.note, extra={"splits": sp})


def set_names() -> tuple[str, ...]:
    """Every set :func:`loader` knows."""
    from model.benchmark.data import TASKS

    return ("ncpqa", "lecoqa", "titles", *TASKS)


def loader(name: str, **where) -> SetLoader:
    """The loader of set ``name`` with its file locations (``path`` for ncpqa; ``questions``, ``pool_file`` for
    lecoqa; ``clean_dir`` for titles; ``root`` for a public set).

    Raises:
        ValueError: an unknown set name (the known ones listed), or titles without ``clean_dir``.
    """
    if name == "ncpqa":
        return NcpqaLoader(**where)
    if name == "lecoqa":
        return LecoqaLoader(**where)
    if name == "titles":
        if "clean_dir" not in where:
            raise ValueError("the titles set needs clean_dir (a documents_clean table folder)")
        return TitlesLoader(**where)
    if name in set_names():
        return PublicLoader(name, **where)
    raise ValueError(f"unknown evaluation set {name!r} (one of {', '.join(set_names())})")
