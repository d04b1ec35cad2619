"""The encoder interface retrieval code is written against (SPEC §7, §8; the shape FlagEmbedding users know):
``encode_queries(texts)`` and ``encode_corpus(texts)``, each float32 (n, dim) with L2-normalised rows, so inner
product = cosine. Code that needs a bare ``texts -> vectors`` callable (the index build's ``embed``) takes the
bound method, ``encoder.encode_corpus`` or ``encoder.encode_queries``."""
from __future__ import annotations

from typing import Protocol, Sequence

import numpy as np

# padded positions (rows x longest window) a forward batch may hold. Measured on 2 CPU cores with e5-small over
# 750-char chunks (512-piece windows): 16 rows a batch embed 5.6 chunks/s against 4.2 at 64 rows, with 60 % of
# the activation memory (docs/retrieval.md, "Embedding batches")
MAX_BATCH_TOKENS = 8192
# forward widths are rounded up to a multiple of this many positions (:func:`padded_width`): a CPU bf16 matmul
# builds and caches a oneDNN primitive per input shape (up to 1,024 of them, each with its buffers), and windows
# sorted by length otherwise give nearly every batch a shape of its own. 64 leaves at most 8 widths for
# 512-position windows; measured on e5-small over real chunks it lowers the embedding's peak memory and runs no
# slower (docs/retrieval.md, "Embedding batches")
WIDTH_MULTIPLE = 64


class TextEncoder(Protocol):
    """What a retriever needs from an encoder."""

    def encode_queries(self, texts: Sequence[str]) -> np.ndarray:
        """Query vectors (n, dim) float32, rows L2-normalised (a query instruction prepended, if any)."""

    def encode_corpus(self, texts: Sequence[str]) -> np.ndarray:
        """Passage vectors (n, dim) float32, rows L2-normalised."""


def padded_width(longest: int, multiple: int = 1, cap: int | None = None) -> int:
    """The width (positions) a batch whose longest window has ``longest`` positions is padded to: rounded up to
    a multiple of ``multiple`` (of ``multiple // 8`` up to ``multiple`` positions, so a short query pays at most
    an eighth of ``multiple`` in padding), but never above ``cap`` (the model's window) nor below ``longest``."""
    step = multiple if longest > multiple else max(1, multiple // 8)
    width = -(-longest // step) * step
    return max(longest, min(width, cap)) if cap is not None else width


def token_batches(lengths: Sequence[int], max_rows: int, max_tokens: int = MAX_BATCH_TOKENS, multiple: int = 1,
                  cap: int | None = None) -> list[np.ndarray]:
    """Row indices of ``lengths`` (tokens per window) in ascending length order (stable), cut into forward
    batches of at most ``max_rows`` rows whose padded size (rows x the batch's :func:`padded_width`, tokens)
    stays within ``max_tokens``; a window longer than ``max_tokens`` is a batch of its own. Sorting by length
    keeps padding small; the token cap bounds the activation memory of long windows without shrinking batches
    of short ones (queries), as token-budget batching does in fairseq (``--max-tokens``, Ott et al. 2019);
    ``multiple`` and ``cap`` bucket the widths (:data:`WIDTH_MULTIPLE`).

    Raises:
        ValueError: ``max_rows``, ``max_tokens`` or ``multiple`` below 1.
    """
    if max_rows < 1 or max_tokens < 1 or multiple < 1:
        raise ValueError(f"token_batches: max_rows = {max_rows}, max_tokens = {max_tokens}, multiple = {multiple}: "
                         "each must be >= 1")
    order = np.argsort(np.asarray(lengths, dtype=np.int64), kind="stable")
    batches, start = [], 0
    for end in range(1, len(order) + 1):
        # the batch [start, end) padded to the width of its last (longest) row
        rows = end - start
        width = padded_width(int(lengths[order[end - 1]]), multiple, cap)
        if rows > max_rows or (rows > 1 and rows * width > max_tokens):
            batches.append(order[start:end - 1])
            start = end - 1
    if start < len(order):
        batches.append(order[start:])
    return batches
