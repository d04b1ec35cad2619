"""The encoder interface retrieval code is written against (SPEC §7, §8; the shape FlagEmbedding users know):
``encode_queries(texts)`` and ``encode_corpus(texts)``, each float32 (n, dim) with L2-normalised rows, so inner
product = cosine. Code that needs a bare ``texts -> vectors`` callable (the index build's ``embed``) takes the
bound method, ``encoder.encode_corpus`` or ``encoder.encode_queries``."""
from __future__ import annotations

from typing import Protocol, Sequence

import numpy as np


class TextEncoder(Protocol):
    """What a retriever needs from an encoder."""

    def encode_queries(self, texts: Sequence[str]) -> np.ndarray:
        """Query vectors (n, dim) float32, rows L2-normalised (a query instruction prepended, if any)."""

    def encode_corpus(self, texts: Sequence[str]) -> np.ndarray:
        """Passage vectors (n, dim) float32, rows L2-normalised."""
