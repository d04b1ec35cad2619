"""Text embeddings from a PolicyBERT encoder (SPEC §7): mean over char states, L2-normalised.

A text longer than the model's window is cut into windows of ``max_len - 2`` tokens of the model's token stream
(one char per position, or a SentencePiece body's own pieces: :mod:`model.tokens`, SPEC §6); the vector is the
token-count-weighted mean of the windows' mean token states, then L2-normalised.
"""
from __future__ import annotations

from typing import Callable, Sequence

import numpy as np
import torch

from model.features import CharEncoder, WordMatcher, collate, encode_tokens
from model.tokens import as_tokens
from model.training import autocast, resolve_device
from retrieval.encoding import token_batches


def _pooled_sums(states: torch.Tensor, attention_mask: torch.Tensor, pooling: str) -> tuple[np.ndarray, np.ndarray]:
    """Per window, the sum of its char states (``mean``) or its [CLS] state times its char count (``cls``),
    and that char count ([CLS] and [SEP] excluded): ``states`` (batch, seq_len, hidden) ->
    ((batch, hidden), (batch,)), so that windows of one text average by char count.

    Raises:
        ValueError: an unknown ``pooling``.
    """
    mask = attention_mask.clone()
    mask[:, 0] = 0  # [CLS]
    lengths = attention_mask.sum(1)
    mask[torch.arange(len(mask), device=mask.device), lengths - 1] = 0  # [SEP]
    n = mask.sum(1).cpu().numpy()
    if pooling == "cls":
        return (states[:, 0] * mask.sum(1, keepdim=True)).cpu().numpy(), n
    if pooling == "mean":
        return (states * mask.unsqueeze(-1)).sum(1).cpu().numpy(), n
    raise ValueError(f"unknown pooling {pooling!r} (cls, mean)")


@torch.no_grad()
def embed_texts(model, enc: CharEncoder, matcher: WordMatcher, texts: Sequence[str], *, max_len: int = 128,
                max_words: int = 40, batch_size: int = 64, device: str = "auto", seed: int = 13,
                on_progress: Callable[[int, int], None] | None = None, pooling: str = "mean",
                precision: str = "auto") -> np.ndarray:
    """Embed texts with a ``PolicyBertModel``; ``precision`` sets the forward's autocast
    (:func:`model.training.autocast`: ``auto`` = bf16 on CUDA only). Windows are batched by length, at most
    ``batch_size`` rows and :data:`retrieval.encoding.MAX_BATCH_TOKENS` padded positions a batch
    (:func:`retrieval.encoding.token_batches`).

    ``pooling``: ``mean`` (mean of a window's char states, SPEC §7) or ``cls`` (the window's [CLS]
    state); windows of one text are averaged by char count either way.

    ``on_progress(windows_done, windows_total)`` is called after every batch.

    Returns:
        float32 array (len(texts), hidden), rows L2-normalised (a text with no chars -> zeros).
    """
    dev = resolve_device(device)
    model.to(dev).eval()
    rng = np.random.default_rng(seed)
    win = max_len - 2
    windows, owner = [], []
    for t, text in enumerate(texts):
        toks = as_tokens(enc, text)
        for s in range(0, len(toks.ids), win):
            e = encode_tokens(toks.window(s, s + win), None, enc, matcher, max_len, max_words, rng)
            windows.append({"input_ids": e.input_ids, "token_type_ids": e.token_type_ids,
                            "word_ids": e.word_ids, "word_spans": e.word_spans})
            owner.append(t)
    hidden = model.config.hidden_size
    sums = np.zeros((len(texts), hidden), dtype=np.float64)
    counts = np.zeros(len(texts), dtype=np.float64)
    done = 0
    for idx in token_batches([len(w["input_ids"]) for w in windows], batch_size):
        batch = {k: v.to(dev) for k, v in collate([windows[j] for j in idx], max_words).items()}
        with autocast(dev, precision):
            states = model(**batch).last_hidden_state.float()
        summed, n = _pooled_sums(states, batch["attention_mask"], pooling)
        for row, j in enumerate(idx):
            sums[owner[j]] += summed[row]
            counts[owner[j]] += n[row]
        done += len(idx)
        if on_progress is not None:
            on_progress(done, len(windows))
    vecs = sums / np.maximum(counts, 1)[:, None]
    norms = np.linalg.norm(vecs, axis=1, keepdims=True)
    return (vecs / np.where(norms == 0, 1, norms)).astype(np.float32)
