"""The encoder interface retrieval code is written against (SPEC §7, §8; the shape FlagEmbedding users know):
``encode_queries(texts)`` and ``encode_corpus(texts)``, each float32 (n, dim) with L2-normalised rows, so inner
product = cosine. :func:`encode_queries` / :func:`encode_corpus` call those methods, and accept the earlier
names (``queries(texts)``, ``__call__(texts)``) and plain ``texts -> vectors`` functions as well."""
from __future__ import annotations

from typing import Protocol, Sequence

import numpy as np


class TextEncoder(Protocol):
    """What a retriever needs from an encoder."""

    def encode_queries(self, texts: Sequence[str]) -> np.ndarray:
        """Query vectors (n, dim) float32, rows L2-normalised (a query instruction prepended, if any)."""

    def encode_corpus(self, texts: Sequence[str]) -> np.ndarray:
        """Passage vectors (n, dim) float32, rows L2-normalised."""


def encode_queries(encoder, texts: Sequence[str]) -> np.ndarray:
    """``encoder.encode_queries(texts)`` (else ``encoder.queries``, else ``encoder(texts)``): (n, dim) float32."""
    for name in ("encode_queries", "queries"):
        fn = getattr(encoder, name, None)
        if callable(fn):
            return fn(list(texts))
    return encoder(list(texts))


def encode_corpus(encoder, texts: Sequence[str]) -> np.ndarray:
    """``encoder.encode_corpus(texts)`` (else ``encoder(texts)``): passage vectors (n, dim) float32."""
    fn = getattr(encoder, "encode_corpus", None)
    return fn(list(texts)) if callable(fn) else encoder(list(texts))


def corpus_fn(encoder):
    """``texts -> passage vectors`` of ``encoder`` (for the build's ``embed`` callables)."""
    return lambda texts: encode_corpus(encoder, texts)


def queries_fn(encoder):
    """``texts -> query vectors`` of ``encoder``."""
    return lambda texts: encode_queries(encoder, texts)
