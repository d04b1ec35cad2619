"""A frozen, precomputed bottom for fine-tuning on a CPU budget (SPEC §10 budgets).

With the first ``k`` char layers frozen, their outputs do not change during fine-tuning, so they are computed
once per example instead of once per step: :func:`cached_bottom` runs the body's embeddings and char layers
``0..k-1`` over every example of the given splits (eval mode: no dropout in the frozen part), keeps each
example's states (its length, hidden) on the CPU, and for the duration of the ``with`` block swaps the model's
embeddings for a lookup of those states and its char-layer list for layers ``k..``. Training and dev evaluation
inside the block then cost only the upper layers; on exit the model is whole again (the same module objects,
the upper layers trained), so test evaluation and ``save_pretrained`` see an ordinary model.

Works for transformers' ``BertFor*`` and for PolicyBERT (:mod:`model.modeling`) whose word side starts at or
above ``k`` (``config.fusion_start >= k``): the word encoder is not part of the frozen bottom.

Exactness: in eval mode the model inside the block gives the whole model's logits at every real position
(tested to 1e-5; padding positions read zero states, and their logits, which no loss or metric reads, differ);
in train mode the frozen layers run without dropout, unlike a frozen-but-recomputed bottom. Memory: one float32
(length, hidden) tensor per distinct example, e.g. 3,000 examples of 64 pieces at hidden 384 take ~300 MB.
"""
from __future__ import annotations

from contextlib import contextmanager
from typing import Callable, Iterator, Sequence

import torch
from torch import nn


def _key(ids: torch.Tensor, token_types: torch.Tensor | None, pad: int) -> tuple[int, bytes, bytes]:
    """The lookup key of one row: its length up to the last non-pad id, and its ids and token types so far."""
    nz = (ids != pad).nonzero()
    n = int(nz[-1]) + 1 if len(nz) else 0
    tt = token_types[:n] if token_types is not None else torch.zeros(n, dtype=torch.long)
    return n, ids[:n].cpu().long().numpy().tobytes(), tt.cpu().long().numpy().tobytes()


class CachedStates(nn.Module):
    """Stands in for a body's embeddings: returns the precomputed layer-``k`` states of each row, found by its
    ids and token types (:func:`_key`), zero-padded to the batch's ``seq_len``.

    Raises:
        KeyError: a row that was not precomputed (naming its length)."""

    def __init__(self, states: dict[tuple[int, bytes, bytes], torch.Tensor], pad: int, hidden: int):
        super().__init__()
        self.states, self.pad, self.hidden = states, pad, hidden

    def forward(self, input_ids: torch.Tensor, token_type_ids: torch.Tensor | None = None, **_) -> torch.Tensor:
        """input_ids, token_type_ids (batch, seq_len) -> (batch, seq_len, hidden)."""
        out = torch.zeros(*input_ids.shape, self.hidden)
        for r in range(input_ids.shape[0]):
            key = _key(input_ids[r], None if token_type_ids is None else token_type_ids[r], self.pad)
            if key not in self.states:
                raise KeyError(f"row {r} (length {key[0]}) was not precomputed by cached_bottom")
            s = self.states[key]
            out[r, :len(s)] = s
        return out.to(input_ids.device)


def _parts(model: nn.Module) -> tuple[nn.Module, nn.Module]:
    base = model.base_model
    return base, base.encoder


@torch.no_grad()
def bottom_states(model: nn.Module, k: int, examples: Sequence[dict], collate_fn: Callable, pad: int,
                  batch_size: int = 32) -> dict[tuple[int, bytes, bytes], torch.Tensor]:
    """Each example's states after char layer ``k - 1`` (embeddings alone for ``k = 0``), (its length, hidden)
    float32 on the CPU, keyed by its ids and token types."""
    from model.modeling import additive_mask

    base, encoder = _parts(model)
    was_training = model.training
    model.eval()
    dev = next(model.parameters()).device
    out: dict[tuple[int, bytes, bytes], torch.Tensor] = {}
    for b in range(0, len(examples), batch_size):
        batch = collate_fn(list(examples[b:b + batch_size]))
        ids, mask = batch["input_ids"].to(dev), batch["attention_mask"].to(dev)
        tt = batch.get("token_type_ids")
        tt = torch.zeros_like(ids) if tt is None else tt.to(dev)
        h = base.embeddings(input_ids=ids, token_type_ids=tt)
        ext = additive_mask(mask, h.dtype)
        for layer in encoder.layer[:k]:
            h = layer(h, ext)
            h = h[0] if isinstance(h, tuple) else h
        for r in range(ids.shape[0]):
            key = _key(ids[r], tt[r], pad)
            out[key] = h[r, :key[0]].float().cpu().clone()
    model.train(was_training)
    return out


@contextmanager
def cached_bottom(model: nn.Module, k: int, splits: Sequence[Sequence[dict]], collate_fn: Callable, pad: int,
                  batch_size: int = 32) -> Iterator[nn.Module]:
    """Inside the block ``model`` runs from precomputed layer-``k`` states of every example in ``splits``
    (module docstring); its bottom (embeddings, char layers ``0..k-1``) is out of the module tree, so an
    optimiser built inside sees only the upper layers, the word side and the head.

    Raises:
        ValueError: ``k`` outside [1, char layers - 1], or a PolicyBERT whose word side starts below ``k``.
    """
    base, encoder = _parts(model)
    layers = encoder.layer
    if not 1 <= k < len(layers):
        raise ValueError(f"frozen layers k={k} must be in [1, {len(layers) - 1}] for a {len(layers)}-layer body")
    start = getattr(encoder, "fusion_start", None)
    if start is not None and len(getattr(encoder, "word_layers", ())) and start < k:
        raise ValueError(f"the word side starts at char layer {start}, inside the frozen bottom of {k} layers: "
                         f"build the model with fusion_start >= {k}")
    states: dict = {}
    for examples in splits:
        states.update(bottom_states(model, k, examples, collate_fn, pad, batch_size))
    embeddings = base.embeddings
    base.embeddings = CachedStates(states, pad, model.config.hidden_size)
    encoder.layer = nn.ModuleList(list(layers)[k:])
    if start is not None:
        encoder.fusion_start = start - k
    try:
        yield model
    finally:
        base.embeddings, encoder.layer = embeddings, layers
        if start is not None:
            encoder.fusion_start = start
