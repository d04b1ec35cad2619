"""Query-Value attention on the last layer(s) of a pretrained BERT body (SPEC §11; Wu et al.'s QV-Attention
as adapted by the QV-Electra paper, "a pre-trained model with Query-Value attention for text classification").

For one head of a layer, with ``Q, K, V`` (each ``(L, d)``) as the pretrained layer computes them:

- ``Ô = softmax(V Qᵀ / √d) Q`` — each value position a weighted sum of the queries (padding masked as in
  the layer);
- ``W_V = W V + b_v`` — new ``W`` (``d x d``, one per head, initialised to the identity) and ``b_v`` (zeros);
- ``β = σ(uᵀ [Ô ⊙ W_V ; V][0] + b_u)`` — new ``u`` (``2d`` per head, zeros) and a bias ``b_u``
  (``gate_bias``, default +10) on the first token (``[CLS]``): one gate per example and head;
- ``g = (1 − β)(Ô ⊙ W_V) + β V``, computed as ``V + σ(−z) (Ô ⊙ W_V − V)`` (``1 − β = σ(−z)`` exactly,
  without the cancellation of ``1 − σ(z)``); the layer's output is ``softmax(Q Kᵀ / √d) g``.

Two initialisations (``init``, recorded as ``config.qv_init``):

- ``gate-bias`` (SPEC §11 as written): ``b_u`` = +10, so ``β = σ(10)`` and the body is intact at step 0 up to
  ``1 − β ≈ 4.5e-5`` of ``(Ô ⊙ W_V − V)`` per head (a bias ≥ ~105 makes ``σ(−z)`` round to 0 in fp32). Caveat,
  measured in ``bench/qv_bench.py``: ``∂β/∂z = β(1 − β)`` ≈ 4.5e-5 there, the gate never opens in fine-tuning.
- ``rezero`` (ReZero, Bachlechner et al. 2020, "ReZero is all you need"; the principle SPEC §6 uses for fusion):
  ``g = V + γ (1 − β)(Ô ⊙ W_V − V)`` with a new per-head scalar ``γ = s · γ̂`` (``qv_gamma`` = ``γ̂``, zeros) and
  ``β`` as in the paper with ``u = 0``, ``b_u = 0`` (``β = ½``). The effective gate ``1 − γ(1 − β)`` (the weight of
  ``V``) is exactly 1 at step 0 — ``g = V + 0`` bit for bit, the pretrained layer — while
  ``∂g/∂γ = (1 − β)(Ô ⊙ W_V − V) ≠ 0``. ``s`` (``gamma_scale``, default 100) is a learning-rate multiplier by
  reparameterisation: Adam's step on ``γ̂`` is ~lr whatever the gradient's scale, so ``γ`` moves ~``s``·lr per step
  (the runner's AdamW has one learning rate for all parameters). At ``γ = 1`` it is the paper's layer.

The modules are swapped in place (:func:`apply_qv`); ``config.qv_layers`` / ``config.qv_gate_bias`` record the
choice and :func:`load_qv_model` rebuilds a saved model exactly. The classes wrapped are transformers'
``BertSelfAttention`` — the self-attention of ``BertModel`` (multilingual-e5-small as converted by
:mod:`model.e5`, its char checkpoints from :mod:`model.backbones`) and of PolicyBERT's char layers.
"""
from __future__ import annotations

import os
from pathlib import Path

import torch
from torch import nn
from transformers.modeling_utils import ALL_ATTENTION_FUNCTIONS
from transformers.models.bert.modeling_bert import BertSelfAttention, eager_attention_forward

DEFAULT_GATE_BIAS = 10.0
INIT_GATE_BIAS = {"gate-bias": DEFAULT_GATE_BIAS, "rezero": 0.0}  # b_u at step 0 per init
DEFAULT_INIT = "rezero"
DEFAULT_GAMMA_SCALE = 100.0
QV_PREFIX = "qv_"


def check_init(init: str) -> str:
    """``init`` if it is a known QV initialisation. Raises ValueError naming the choices otherwise."""
    if init not in INIT_GATE_BIAS:
        raise ValueError(f"QV init {init!r}: choose from {', '.join(INIT_GATE_BIAS)}")
    return init


class QVSelfAttention(BertSelfAttention):
    """``BertSelfAttention`` with the Query-Value gate of SPEC §11 (module docstring). Parameter names of the
    pretrained layer are unchanged (``query``/``key``/``value``), the new ones start with ``qv_``:
    ``qv_weight`` (H, d, d), ``qv_bias`` (H, d), ``qv_gate`` (H, 2d), ``qv_gate_bias`` (H,), and with
    ``init="rezero"`` ``qv_gamma`` (H,) (zeros; ``γ = gamma_scale · qv_gamma``).

    Raises:
        ValueError: unknown ``init``.
    """

    def __init__(self, config, layer_idx: int | None = None, gate_bias: float | None = None,
                 init: str = DEFAULT_INIT, gamma_scale: float = DEFAULT_GAMMA_SCALE):
        super().__init__(config, is_causal=False, layer_idx=layer_idx)
        self.qv_init, self.gamma_scale = check_init(init), float(gamma_scale)
        bias = INIT_GATE_BIAS[init] if gate_bias is None else float(gate_bias)
        h, d = self.num_attention_heads, self.attention_head_size
        self.qv_weight = nn.Parameter(torch.eye(d).repeat(h, 1, 1))
        self.qv_bias = nn.Parameter(torch.zeros(h, d))
        self.qv_gate = nn.Parameter(torch.zeros(h, 2 * d))
        self.qv_gate_bias = nn.Parameter(torch.full((h,), bias))
        self.qv_gamma = nn.Parameter(torch.zeros(h)) if init == "rezero" else None

    def new_parameter_names(self) -> list[str]:
        """Names of the parameters QV adds (``qv_*``), in a fixed order."""
        return [n for n in ("qv_weight", "qv_bias", "qv_gate", "qv_gate_bias", "qv_gamma")
                if getattr(self, n) is not None]

    @classmethod
    def wrap(cls, old: BertSelfAttention, gate_bias: float | None = None, init: str = DEFAULT_INIT,
             gamma_scale: float = DEFAULT_GAMMA_SCALE) -> "QVSelfAttention":
        """A QV module that shares ``old``'s query/key/value projections and dropout (same tensors, no copy);
        new parameters on ``old``'s device and dtype.

        Raises:
            TypeError: ``old`` is not a ``BertSelfAttention`` (or is cross-attention / causal).
            ValueError: unknown ``init``.
        """
        if not isinstance(old, BertSelfAttention) or getattr(old, "is_causal", False):
            raise TypeError(f"QV-attention wraps a bidirectional BertSelfAttention, got {type(old).__name__}")
        with torch.random.fork_rng(devices=[]):  # the throw-away projections below draw no caller randomness
            new = cls(old.config, old.layer_idx, gate_bias, init, gamma_scale)
        new.query, new.key, new.value, new.dropout = old.query, old.key, old.value, old.dropout
        w = old.query.weight
        for name in new.new_parameter_names():
            setattr(new, name, nn.Parameter(getattr(new, name).data.to(w.device, w.dtype)))
        return new.train(old.training)

    def mix_and_logit(self, q: torch.Tensor, v: torch.Tensor, attention_mask, attend, **kwargs):
        """``(Ô ⊙ W_V, z)`` for ``q``, ``v`` of shape (B, H, L, d): the mix (B, H, L, d) and the gate's logit
        ``z = uᵀ [Ô ⊙ W_V ; V][0] + b_u`` (B, H), so that ``β = σ(z)``."""
        o_hat = attend(self, v, q, q, attention_mask, dropout=0.0, scaling=self.scaling, **kwargs)[0]
        o_hat = o_hat.transpose(1, 2)  # the interface returns (B, L, H, d)
        wv = torch.einsum("hed,bhld->bhle", self.qv_weight, v) + self.qv_bias[None, :, None, :]
        mix = o_hat * wv
        z = (torch.cat([mix[:, :, 0], v[:, :, 0]], dim=-1) * self.qv_gate).sum(-1) + self.qv_gate_bias
        return mix, z

    def mix_weight(self, z: torch.Tensor) -> torch.Tensor:
        """The weight of ``(Ô ⊙ W_V − V)`` in ``g`` from the gate logit ``z`` (B, H): ``1 − β = σ(−z)``
        (gate-bias) or ``γ (1 − β)`` (rezero; exactly 0 while ``γ = 0``). ``1 −`` it is the effective gate."""
        w = torch.sigmoid(-z)  # (1 - β) = σ(-z), no cancellation
        return w * (self.gamma_scale * self.qv_gamma) if self.qv_gamma is not None else w

    def gate(self, hidden_states: torch.Tensor, attention_mask: torch.Tensor | None = None,
             effective: bool = False) -> torch.Tensor:
        """``β`` per example and head, (B, H), for inspection (the computation of :meth:`forward`); with
        ``effective`` the weight of ``V`` in ``g``, ``1 − γ(1 − β)`` under rezero (= ``β`` under gate-bias)."""
        q, _, v = self._heads(hidden_states)
        z = self.mix_and_logit(q, v, attention_mask, self._interface())[1]
        return 1 - self.mix_weight(z) if effective else torch.sigmoid(z)

    def _heads(self, hidden_states: torch.Tensor):
        shape = (*hidden_states.shape[:-1], -1, self.attention_head_size)
        return tuple(p(hidden_states).view(shape).transpose(1, 2) for p in (self.query, self.key, self.value))

    def _interface(self):
        return ALL_ATTENTION_FUNCTIONS.get_interface(self.config._attn_implementation, eager_attention_forward)

    def forward(self, hidden_states: torch.Tensor, attention_mask: torch.Tensor | None = None,
                past_key_values=None, **kwargs) -> tuple[torch.Tensor, torch.Tensor | None]:
        """(B, L, hidden) -> ((B, L, hidden), attention weights or None), as ``BertSelfAttention``.

        Raises:
            ValueError: a key/value cache is passed (QV-attention is for bidirectional encoders).
        """
        if past_key_values is not None:
            raise ValueError("QV-attention does not support a key/value cache (encoder layers only)")
        q, k, v = self._heads(hidden_states)
        attend = self._interface()
        mix, z = self.mix_and_logit(q, v, attention_mask, attend, **kwargs)
        g = v + self.mix_weight(z)[..., None, None] * (mix - v)
        out, weights = attend(self, q, k, g, attention_mask, dropout=self.dropout.p if self.training else 0.0,
                              scaling=self.scaling, **kwargs)
        return out.reshape(*hidden_states.shape[:-1], -1).contiguous(), weights


def encoder_layers(model: nn.Module) -> nn.ModuleList:
    """The char/BERT layers of ``model`` (``BertModel``, ``Bert*For*``, PolicyBERT models): ``encoder.layer``.

    Raises:
        TypeError: no ``encoder.layer`` list on the model or its base model.
    """
    base = getattr(model, "base_model", model)
    layers = getattr(getattr(base, "encoder", None), "layer", None)
    if not isinstance(layers, nn.ModuleList):
        raise TypeError(f"{type(model).__name__}: no encoder.layer list to put QV-attention into")
    return layers


def apply_qv(model: nn.Module, n_layers: int, gate_bias: float | None = None, init: str = DEFAULT_INIT,
             gamma_scale: float = DEFAULT_GAMMA_SCALE) -> nn.Module:
    """Put QV-attention into the last ``n_layers`` layers of ``model`` in place (0: nothing) and record
    ``qv_layers`` / ``qv_init`` / ``qv_gate_bias`` / ``qv_gamma_scale`` in ``model.config`` (saved with
    ``save_pretrained``). ``gate_bias`` None: the init's own (+10 gate-bias, 0 rezero). Returns ``model``.

    Raises:
        ValueError: ``n_layers`` negative or more than the model's layers, the model already has QV layers,
            or an unknown ``init``.
        TypeError: the model has no BERT self-attention layers.
    """
    check_init(init)
    bias = INIT_GATE_BIAS[init] if gate_bias is None else float(gate_bias)
    layers = encoder_layers(model)
    if not 0 <= n_layers <= len(layers):
        raise ValueError(f"qv_layers={n_layers}: the model has {len(layers)} layers")
    if any(isinstance(layer.attention.self, QVSelfAttention) for layer in layers):
        raise ValueError("the model already has QV-attention layers")
    for layer in list(layers)[len(layers) - n_layers:]:
        layer.attention.self = QVSelfAttention.wrap(layer.attention.self, bias, init, gamma_scale)
    model.config.qv_layers, model.config.qv_gate_bias = int(n_layers), bias
    model.config.qv_init, model.config.qv_gamma_scale = init, float(gamma_scale)
    return model


def qv_state(model: nn.Module) -> dict[str, torch.Tensor]:
    """The QV parameters of ``model`` by state-dict name (empty without QV layers)."""
    return {k: v for k, v in model.state_dict().items() if k.rsplit(".", 1)[-1].startswith(QV_PREFIX)}


def qv_parameter_count(model: nn.Module) -> dict[str, float]:
    """``{"qv": new parameters, "total": all parameters incl. QV, "token_embeddings": rows x hidden of the
    input (token) embeddings, "pct_all": qv / (total - qv) in %, "pct_without_token_embeddings": qv /
    (total - qv - token_embeddings) in %}`` — percentages relative to the body before QV."""
    qv = sum(v.numel() for v in qv_state(model).values())
    total = sum(p.numel() for p in model.parameters())
    emb = model.get_input_embeddings().weight.numel()
    return {"qv": qv, "total": total, "token_embeddings": emb, "pct_all": 100.0 * qv / (total - qv),
            "pct_without_token_embeddings": 100.0 * qv / (total - qv - emb)}


def _saved_tensors(model_dir: Path) -> dict[str, torch.Tensor]:
    from safetensors.torch import load_file

    files = sorted(model_dir.glob("*.safetensors"))
    if not files:
        raise FileNotFoundError(f"{model_dir}: no *.safetensors weights")
    out: dict[str, torch.Tensor] = {}
    for f in files:
        out.update(load_file(str(f)))
    return out


def load_qv_model(model_cls, model_dir: str | os.PathLike, **kwargs) -> nn.Module:
    """``model_cls.from_pretrained(model_dir, **kwargs)`` with the QV layers its ``config.json`` records
    (``qv_layers``, ``qv_init`` — ``gate-bias`` when absent, as saved before it existed —, ``qv_gate_bias``,
    ``qv_gamma_scale``) rebuilt and their saved weights loaded: the same outputs as when saved.

    Raises:
        ValueError: the config records QV layers but the weights lack (some of) their parameters.
    """
    from transformers.utils import logging as hf_logging

    verbosity = hf_logging.get_verbosity()
    hf_logging.set_verbosity_error()  # the qv_* tensors are "unexpected" to the plain class; loaded below
    try:
        model = model_cls.from_pretrained(model_dir, **kwargs)
    finally:
        hf_logging.set_verbosity(verbosity)
    n = int(getattr(model.config, "qv_layers", 0) or 0)
    if not n:
        return model
    cfg = model.config
    apply_qv(model, n, float(getattr(cfg, "qv_gate_bias", DEFAULT_GATE_BIAS)), getattr(cfg, "qv_init", "gate-bias"),
             float(getattr(cfg, "qv_gamma_scale", DEFAULT_GAMMA_SCALE)))
    want = qv_state(model)
    saved = _saved_tensors(Path(model_dir))
    missing = [k for k in want if k not in saved]
    if missing:
        raise ValueError(f"{model_dir}: config has qv_layers={n} but the weights lack {missing[:3]}")
    model.load_state_dict({k: saved[k] for k in want}, strict=False)
    return model


__all__ = ["DEFAULT_GAMMA_SCALE", "DEFAULT_GATE_BIAS", "DEFAULT_INIT", "INIT_GATE_BIAS", "QVSelfAttention",
           "apply_qv", "check_init", "encoder_layers", "load_qv_model", "qv_parameter_count", "qv_state"]
