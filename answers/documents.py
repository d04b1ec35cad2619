"""Cleaned documents for the answer stage: the text the offsets point into and the metadata shown with an
answer (SPEC §1, §9). Serving reads them from the index version's ``texts`` part (:meth:`DocumentStore.from_frame`
over :attr:`retrieval.bundle.ServingBundle.texts`); the evaluation may read a ``documents_clean`` table."""
from __future__ import annotations

import datetime as dt
import os
from pathlib import Path

import pandas as pd

META = ("title", "url", "source", "pubtime", "external_id")


def _plain(v):
    if v is None or (isinstance(v, float) and v != v) or v is pd.NaT:
        return None
    if isinstance(v, (dt.date, pd.Timestamp)):
        return v.isoformat()[:10]
    return v


class DocumentStore:
    """``doc_id -> text`` and metadata of a ``documents_clean`` table (or of a frame with its columns), read once.

    Raises (at construction):
        FileNotFoundError: no ``documents_clean`` table in ``clean_dir``.
    """

    def __init__(self, clean_dir: str | os.PathLike):
        from storage import read_manifest, read_table

        clean_dir = Path(clean_dir)
        if not (clean_dir / "manifest.json").is_file():
            raise FileNotFoundError(f"no documents_clean table in {clean_dir}: run the pipeline first")
        have = set(read_manifest(clean_dir)["columns"])
        self._fill(read_table(clean_dir, ["doc_id", "text"] + [c for c in META if c in have]))

    @classmethod
    def from_frame(cls, df: pd.DataFrame) -> "DocumentStore":
        """A store over ``df`` (``doc_id``, ``text`` and any of :data:`META`): an index version's texts."""
        store = cls.__new__(cls)
        store._fill(df)
        return store

    def _fill(self, df: pd.DataFrame) -> None:
        self.text = dict(zip(df["doc_id"], df["text"]))
        self.meta = {r["doc_id"]: {c: _plain(r.get(c)) for c in META}
                     for r in df.drop(columns=["text"]).to_dict("records")}

    def get(self, doc_id: str) -> tuple[str | None, dict]:
        """(cleaned text or None when unknown, metadata dict with title/url/source/pubtime/external_id)."""
        return self.text.get(doc_id), self.meta.get(doc_id, {c: None for c in META})
