"""Serving related documents from an index version (SPEC §12, §7): the ``related`` part (an LTM-B model file,
:mod:`docmatch.ltm`) scores a document of the version against every other one.

At load every document's matrix (its chunks' stored vectors in order, :func:`docmatch.segments.version_matrices`)
is encoded once by the model (:meth:`docmatch.ltm.LTMB.encode`), so an answer runs only the interaction and the
head: one document against all others in one batch.
"""
from __future__ import annotations

import json
import os
from pathlib import Path

import numpy as np
import pandas as pd
import torch

from docmatch.ltm import from_json, mean_cosine, pad
from docmatch.parts import RELATED_PART
from docmatch.segments import version_matrices

PART, PART_FILE = RELATED_PART.name, RELATED_PART.file  # declared in docmatch.parts


class RelatedIndex:
    """The related-documents model of one index version over its documents.

    ``related(doc_id, k)`` -> the ``k`` best other documents (dicts ``doc_id, title, score, external_id``);
    ``score(pairs)`` -> the probabilities of ``(a, b)`` doc id pairs; ``resolve(id, column)`` maps an
    ``external_id`` to the version's ``doc_id``.
    """

    def __init__(self, model, mats: dict[str, np.ndarray], texts: pd.DataFrame, info: dict | None = None):
        self.model, self.info, self.fused = model.eval(), info or {}, None  # fused: docmatch.fused_serve.attach
        self.ids = sorted(mats)
        self.row = {d: i for i, d in enumerate(self.ids)}
        with torch.no_grad():
            x, self.mask = pad([mats[d] for d in self.ids], model.cfg.max_segments)
            self.h = model.encode(x, self.mask)
            self.x = x
            m = _np_mean(x, self.mask)
            self.means = m / np.maximum(np.linalg.norm(m, axis=1, keepdims=True), 1e-12)
        meta = texts.set_index("doc_id") if len(texts) else pd.DataFrame(columns=["title", "external_id"])
        self.title = {d: _text(meta, d, "title") for d in self.ids}
        self.external = {d: _text(meta, d, "external_id") for d in self.ids}
        self.by_external = {v: d for d, v in self.external.items() if v is not None}

    def resolve(self, key: str, column: str = "doc_id") -> str:
        """The version's doc_id of ``key`` read as ``column`` (``doc_id`` | ``external_id``).

        Raises:
            KeyError: no such document in the version (the message names it).
        """
        d = key if column == "doc_id" else self.by_external.get(key)
        if d not in self.row:
            shown = repr(key[:80]) + (f" ({len(key):,} chars)" if len(key) > 80 else "")
            raise KeyError(f"no document with {column} {shown} in this index version")
        return d

    def _scores(self, a: str, rows: np.ndarray) -> np.ndarray:
        i = self.row[a]
        n = len(rows)
        with torch.no_grad():
            am = self.mask[i:i + 1].expand(n, -1)
            cos = mean_cosine(self.x[i:i + 1].expand(n, -1, -1), am, self.x[rows], self.mask[rows])
            logits = self.model.match(self.h[i:i + 1].expand(n, -1, -1), am, self.h[rows], self.mask[rows], cos)
        return torch.sigmoid(logits).numpy()

    def related(self, doc_id: str, k: int = 10, depth: int | None = 500) -> list[dict]:
        """The ``k`` documents scoring highest with ``doc_id`` (itself excluded), best first, ties by doc_id.
        ``depth``: LTM-B scores only the ``depth`` documents whose mean vectors are closest to ``doc_id``'s
        (the ``mean`` baseline as first stage; None: every document) — exact for versions of at most ``depth``
        + 1 documents, and what keeps an answer under 0.2 s on larger ones (docs/related.md)."""
        if k < 1:
            raise ValueError(f"k must be >= 1, got {k}")
        if self.fused is not None:  # the part's fused ranking (docmatch.fused_serve)
            return self.fused.related(doc_id, k)
        i = self.row[doc_id]
        rows = np.array([j for j in range(len(self.ids)) if j != i], dtype=np.int64)
        if depth is not None and len(rows) > depth:
            cos = self.means[rows] @ self.means[i]
            rows = np.sort(rows[np.argsort(-cos, kind="stable")[:depth]])
        if not len(rows):
            return []
        s = self._scores(doc_id, rows)
        order = np.lexsort((rows, -s))[:k]
        return [self._hit(self.ids[rows[j]], float(s[j])) for j in order]

    def score(self, pairs: list[tuple[str, str]]) -> list[float]:
        """Match probabilities of ``(a, b)`` doc-id pairs (each id must be in the version); fused scores when
        the part is fused (:meth:`docmatch.fused_serve.FusedRanker.score`)."""
        if self.fused is not None:
            return self.fused.score(pairs)
        return [float(self._scores(a, np.array([self.row[b]]))[0]) for a, b in pairs]

    def _hit(self, d: str, score: float) -> dict:
        return {"doc_id": d, "title": self.title[d], "score": score, "external_id": self.external[d]}


def _np_mean(x: torch.Tensor, mask: torch.Tensor) -> np.ndarray:
    """Mean of the real rows (n, dim) float32 of padded documents ``x`` (n, rows, dim)."""
    m = mask.unsqueeze(-1).float()
    return ((x * m).sum(1) / m.sum(1).clamp(min=1)).numpy()


def _text(meta: pd.DataFrame, d: str, col: str):
    if col not in meta.columns or d not in meta.index:
        return None
    v = meta.at[d, col]
    return None if v is None or (isinstance(v, float) and v != v) else str(v)


def load(version_dir: str | os.PathLike) -> RelatedIndex:
    """The related model of the index version in ``version_dir``: its ``related`` part checked against the
    manifest's sha256 (:func:`retrieval.parts.part_path`), its documents' matrices from the version's own vectors
    and titles from its ``texts`` part (when it has one).

    Raises:
        retrieval.parts.PartError: no ``related`` part, or it changed since publication.
        FileNotFoundError: the version keeps no chunk vectors. ValueError: an unreadable model file.
    """
    from retrieval.parts import TEXTS, part_path, read_texts

    vdir = Path(version_dir)
    manifest = json.loads((vdir / "manifest.json").read_text(encoding="utf-8"))
    path = part_path(vdir, manifest, PART)
    saved = from_json(path.read_text(encoding="utf-8"), str(path))
    mats = version_matrices(vdir, max_segments=saved.model.cfg.max_segments)
    has_texts = isinstance((manifest.get("parts") or {}).get(TEXTS), dict)
    texts = read_texts(vdir, manifest) if has_texts else pd.DataFrame(columns=["doc_id", "title", "external_id"])
    from docmatch.fused_serve import attach

    return attach(RelatedIndex(saved.model, mats, texts, saved.info), vdir)


def load_part(bundle, path: Path) -> RelatedIndex:
    """The ``related`` part's loader (:data:`docmatch.parts.RELATED_PART`): :func:`load` of the bundle's
    version folder (``path`` already checked)."""
    return load(bundle.folder)
