"""Chunks of documents cut at sentence ends (SPEC §7): at most ``max_chars`` with ``overlap`` chars."""
from __future__ import annotations

import hashlib
import re
from dataclasses import dataclass

import pandas as pd

from storage.bounds import check_bounds, check_order

_SENT_END = re.compile(r"[^。！？；!?;\n]*(?:[。！？；!?;]+[”’」』）)]*|\n|$)")
CHUNK_COLUMNS = ("chunk_id", "doc_id", "start", "end", "text", "title", "source", "url")


@dataclass(frozen=True)
class ChunkConfig:
    """max_chars: longest chunk (750); overlap: chars shared with the previous chunk (<= 150)."""

    max_chars: int = 750
    overlap: int = 150

    def __post_init__(self):
        check_bounds(self, max_chars=(8, 1_000_000), overlap=(0, 1_000_000))
        check_order(self, "overlap", "max_chars", strict=True)


def chunk_id(doc_id: str, text: str) -> int:
    """Stable positive int64 id from sha256(doc_id + US + text) (FAISS ids)."""
    d = hashlib.sha256(f"{doc_id}\x1f{text}".encode("utf-8")).digest()
    return int.from_bytes(d[:8], "big") & 0x7FFF_FFFF_FFFF_FFFF


def sentence_spans(text: str, max_chars: int) -> list[tuple[int, int]]:
    """(start, end) char offsets of sentences; a sentence longer than ``max_chars`` is cut."""
    spans = []
    for m in _SENT_END.finditer(text):
        s, e = m.span()
        while e - s > max_chars:
            spans.append((s, s + max_chars))
            s += max_chars
        if e > s:
            spans.append((s, e))
    return spans


def chunk_text(text: str, cfg: ChunkConfig = ChunkConfig()) -> list[tuple[int, int]]:
    """Greedy chunks of whole sentences, each <= ``max_chars``; the next chunk starts at the
    earliest sentence that keeps the overlap with the previous chunk <= ``overlap`` chars.

    Returns (start, end) offsets into ``text``.
    """
    spans = sentence_spans(text, cfg.max_chars)
    chunks, i = [], 0
    while i < len(spans):
        j = i
        while j + 1 < len(spans) and spans[j + 1][1] - spans[i][0] <= cfg.max_chars:
            j += 1
        chunks.append((spans[i][0], spans[j][1]))
        if j + 1 >= len(spans):
            break
        k = j + 1
        while k - 1 > i and spans[j][1] - spans[k - 1][0] <= cfg.overlap:
            k -= 1
        i = k
    return chunks


def build_chunks(docs: pd.DataFrame, cfg: ChunkConfig = ChunkConfig()) -> pd.DataFrame:
    """Chunks of every document of ``documents_clean`` (doc_id, text, title, source, url).

    Returns columns :data:`CHUNK_COLUMNS`, plus ``external_id`` when ``docs`` has it (documents imported from
    JSON Lines / Parquet keep their own id on every chunk and search hit); identical chunk texts in one document
    are kept once.
    """
    rows, seen = [], set()
    external = "external_id" in docs.columns
    for r in docs.itertuples(index=False):
        for s, e in chunk_text(r.text, cfg):
            t = r.text[s:e].strip()
            cid = chunk_id(r.doc_id, t)
            if not t or cid in seen:
                continue
            seen.add(cid)
            rows.append((cid, r.doc_id, s, e, t, r.title, r.source, r.url) + ((r.external_id,) if external else ()))
    columns = list(CHUNK_COLUMNS) + (["external_id"] if external else [])
    return pd.DataFrame(rows, columns=columns).astype({"chunk_id": "int64"})
