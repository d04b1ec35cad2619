"""LTM-B, the long-text matching model of SPEC §12, over precomputed segment vectors (torch).

Each document is a matrix, one row a segment vector in document order (:mod:`docmatch.segments`), padded to the
batch's longest with a mask. Per document: a linear map to ``hidden`` (+ LayerNorm), a BiLSTM over the rows whose
outputs (the position matrix) are ADDED to the rows, and a small Transformer encoder. The two documents then
interact: each row attends over the other document's rows (cross-attention, scaled dot product), the features
``[A; Â; |A − Â|; A ⊙ Â]`` are mapped to ``hidden`` and pooled (mean and max over rows); the two pooled vectors
``[a; b; |a − b|; a ⊙ b]`` go to a fully connected layer giving the match logit, plus (``skip``) a learned
multiple of the cosine of the two documents' mean input rows. Symmetric in its two inputs.

Ablation switches (:class:`LTMConfig`): ``positions=False`` (no BiLSTM), ``transformer=False`` (no Transformer),
``interaction="cosine"`` (no cross-attention nor FC: the logit is ``scale · cos(mean a, mean b) + bias``).

Save / load: one JSON file (:func:`save`, :func:`load_file`) holding ``config``, ``info`` (provenance, figures)
and the weights as base64 safetensors bytes: a reload scores identically.
"""
from __future__ import annotations

import base64
import json
import os
from dataclasses import asdict, dataclass, field

import torch
from torch import nn

FORMAT = "ltm-b/1"


@dataclass(frozen=True)
class LTMConfig:
    """dim: input segment vector size; hidden: model width; heads / layers: Transformer encoder; dropout;
    positions / transformer / interaction (``cross`` | ``cosine``): the architecture's switches (ablations);
    max_segments: rows kept per document (the first ones); skip: add ``w · cos(mean rows a, mean rows b)`` of
    the INPUT rows to the logit (``w`` learned, from 20), so training starts from the mean-vector ranking
    instead of from random (a residual connection around the matching network)."""

    dim: int = 384
    hidden: int = 128
    heads: int = 4
    layers: int = 1
    dropout: float = 0.1
    positions: bool = True
    transformer: bool = True
    interaction: str = "cross"
    max_segments: int = 4
    skip: bool = True

    def __post_init__(self):
        if self.interaction not in ("cross", "cosine"):
            raise ValueError(f"interaction must be 'cross' or 'cosine', got {self.interaction!r}")
        if self.hidden % 2 or self.hidden % self.heads:
            raise ValueError(f"hidden {self.hidden} must be even and divisible by heads {self.heads}")
        if min(self.dim, self.layers, self.max_segments) < 1 or not 0 <= self.dropout < 1:
            raise ValueError("dim, layers and max_segments must be >= 1 and dropout in [0, 1)")


class LTMB(nn.Module):
    """LTM-B (module docstring). ``forward(a, a_mask, b, b_mask)``: a, b float (batch, rows, dim), masks bool
    (batch, rows) True on real rows -> match logits (batch,)."""

    def __init__(self, cfg: LTMConfig):
        super().__init__()
        self.cfg, h = cfg, cfg.hidden
        self.proj = nn.Sequential(nn.Linear(cfg.dim, h), nn.LayerNorm(h))
        self.lstm = nn.LSTM(h, h // 2, batch_first=True, bidirectional=True) if cfg.positions else None
        self.encoder = nn.TransformerEncoder(
            nn.TransformerEncoderLayer(h, cfg.heads, 2 * h, cfg.dropout, batch_first=True),
            cfg.layers, enable_nested_tensor=False) if cfg.transformer else None
        if cfg.interaction == "cross":
            self.mix = nn.Sequential(nn.Linear(4 * h, h), nn.ReLU(), nn.Dropout(cfg.dropout))
            self.head = nn.Sequential(nn.Linear(8 * h, h), nn.ReLU(), nn.Dropout(cfg.dropout), nn.Linear(h, 1))
            self.skip = nn.Parameter(torch.tensor(20.0)) if cfg.skip else None
            if cfg.skip:  # start at 20 · (cos − 0.85): e5's cosines of related texts lie around 0.85
                with torch.no_grad():
                    self.head[-1].bias.fill_(-17.0)
        else:
            self.scale = nn.Parameter(torch.tensor(10.0))
            self.bias = nn.Parameter(torch.tensor(-5.0))
            self.skip = None

    def encode(self, x: torch.Tensor, mask: torch.Tensor) -> torch.Tensor:
        """Row features (batch, rows, hidden) of documents ``x`` (batch, rows, dim) with ``mask``."""
        h = self.proj(x)
        if self.lstm is not None:
            pos, _ = self.lstm(h)
            h = h + pos
        if self.encoder is not None:
            h = self.encoder(h, src_key_padding_mask=~mask)
        return h * mask.unsqueeze(-1)

    def forward(self, a, a_mask, b, b_mask) -> torch.Tensor:
        cos = mean_cosine(a, a_mask, b, b_mask)
        return self.match(self.encode(a, a_mask), a_mask, self.encode(b, b_mask), b_mask, cos)

    def match(self, ha, a_mask, hb, b_mask, cos) -> torch.Tensor:
        """Logits (batch,) from row features of :meth:`encode` (precomputed once per document when serving) and
        ``cos`` (batch,), the cosine of the two documents' mean input rows (:func:`mean_cosine`)."""
        if self.cfg.interaction == "cosine":
            cos = nn.functional.cosine_similarity(_mean(ha, a_mask), _mean(hb, b_mask), dim=-1)
            return self.scale * cos + self.bias
        va, vb = self._side(ha, a_mask, hb, b_mask), self._side(hb, b_mask, ha, a_mask)
        z = self.head(torch.cat([va, vb, (va - vb).abs(), va * vb], -1)).squeeze(-1)
        return z + self.skip * cos if self.skip is not None else z

    def _side(self, h, mask, other, other_mask) -> torch.Tensor:
        """Pooled (mean ‖ max) features (batch, 2·hidden) of ``h`` after cross-attention over ``other``."""
        att = h @ other.transpose(1, 2) / self.cfg.hidden ** 0.5
        att = att.masked_fill(~other_mask.unsqueeze(1), float("-inf")).softmax(-1)
        aligned = att @ other
        z = self.mix(torch.cat([h, aligned, (h - aligned).abs(), h * aligned], -1))
        big = z.masked_fill(~mask.unsqueeze(-1), float("-inf")).amax(1)
        return torch.cat([_mean(z, mask), big], -1)


def mean_cosine(a, a_mask, b, b_mask) -> torch.Tensor:
    """Cosine (batch,) of the means of the real rows of ``a`` and ``b`` (batch, rows, dim): the ``mean``
    baseline's score, LTM-B's skip term."""
    return nn.functional.cosine_similarity(_mean(a, a_mask), _mean(b, b_mask), dim=-1)


def _mean(h: torch.Tensor, mask: torch.Tensor) -> torch.Tensor:
    m = mask.unsqueeze(-1).float()
    return (h * m).sum(1) / m.sum(1).clamp(min=1)


def pad(mats, max_rows: int) -> tuple[torch.Tensor, torch.Tensor]:
    """A batch from numpy matrices (rows_i, dim): (batch, rows, dim) float32 zero-padded to the longest (at most
    ``max_rows``, the first rows kept) and the mask (batch, rows) bool."""
    rows = [min(len(m), max_rows) for m in mats]
    width = max(rows)
    x = torch.zeros(len(mats), width, mats[0].shape[1])
    mask = torch.zeros(len(mats), width, dtype=torch.bool)
    for i, (m, r) in enumerate(zip(mats, rows)):
        x[i, :r] = torch.as_tensor(m[:r])
        mask[i, :r] = True
    return x, mask


def score_pairs(model: LTMB, mats_a, mats_b, batch_size: int = 512) -> list[float]:
    """Match probabilities (sigmoid of the logits) of the pairs ``(mats_a[i], mats_b[i])``, eval mode, no grad."""
    model.eval()
    out = []
    with torch.no_grad():
        for i in range(0, len(mats_a), batch_size):
            a, am = pad(mats_a[i:i + batch_size], model.cfg.max_segments)
            b, bm = pad(mats_b[i:i + batch_size], model.cfg.max_segments)
            out += torch.sigmoid(model(a, am, b, bm)).tolist()
    return out


@dataclass
class Saved:
    """A loaded model file: the model (eval mode) and its ``info`` (provenance, figures)."""

    model: LTMB
    info: dict = field(default_factory=dict)


def to_json(model: LTMB, info: dict | None = None) -> str:
    """The model file's text: ``format``, ``config``, ``info`` and base64 safetensors ``weights``."""
    from safetensors.torch import save

    blob = save({k: v.detach().contiguous() for k, v in model.state_dict().items()})
    return json.dumps({"format": FORMAT, "config": asdict(model.cfg), "info": info or {},
                       "weights": base64.b64encode(blob).decode("ascii")}, ensure_ascii=False)


def save(model: LTMB, path: str | os.PathLike, info: dict | None = None) -> None:
    """Write the model file (:func:`to_json`) atomically."""
    from storage import atomic_write_text

    atomic_write_text(path, to_json(model, info))


def from_json(text: str, where: str = "model") -> Saved:
    """The model of a model file's text.

    The config's sizes are bounded (:data:`CONFIG_BOUNDS`) and the weights' tensor shapes compared with the
    config's (a model built on the ``meta`` device, nothing allocated) before the model is built, so a file
    claiming huge sizes never drives an allocation beyond its own weights.

    Raises:
        ValueError: not an LTM-B file (format), a bad or oversized config, or weights that do not fit the config.
    """
    from safetensors.torch import load

    try:
        d = json.loads(text)
    except (ValueError, RecursionError):
        raise ValueError(f"{where}: not JSON (or nested too deep)") from None
    if not isinstance(d, dict) or d.get("format") != FORMAT:
        raise ValueError(f"{where}: not an LTM-B model file (format {FORMAT!r})")
    cfg = _config(d.get("config"), where)
    try:
        weights = load(base64.b64decode(d["weights"], validate=True))
    except (KeyError, TypeError, ValueError, RuntimeError) as exc:  # binascii.Error and SafetensorError among them
        raise ValueError(f"{where}: weights are not base64 safetensors ({str(exc)[:120]})") from None
    with torch.device("meta"):
        want = {k: tuple(v.shape) for k, v in LTMB(cfg).state_dict().items()}
    got = {k: tuple(v.shape) for k, v in weights.items()}
    if got != want:
        bad = sorted(set(got) ^ set(want)) or [k for k in want if got[k] != want[k]]
        raise ValueError(f"{where}: weights do not fit the config (first: {str(bad[0])[:80]})")
    model = LTMB(cfg)
    model.load_state_dict(weights)
    return Saved(model.eval(), d.get("info") if isinstance(d.get("info"), dict) else {})


CONFIG_BOUNDS = {"dim": 1 << 13, "hidden": 1 << 12, "heads": 64, "layers": 16, "max_segments": 1 << 12}


def _config(c, where: str) -> LTMConfig:
    """The :class:`LTMConfig` of a model file's ``config``, its sizes integers within :data:`CONFIG_BOUNDS`.

    Raises:
        ValueError: not an object, an unknown field, or a size out of bounds.
    """
    if not isinstance(c, dict):
        raise ValueError(f"{where}: config is not an object")
    for k, hi in CONFIG_BOUNDS.items():
        v = c.get(k, getattr(LTMConfig, k))
        if isinstance(v, bool) or not isinstance(v, int) or not 1 <= v <= hi:
            raise ValueError(f"{where}: config {k} is {str(v)[:40]}, not an integer in [1, {hi}]")
    try:
        return LTMConfig(**c)
    except TypeError as exc:
        raise ValueError(f"{where}: config has an unknown field ({str(exc)[:80]})") from None


def load_file(path: str | os.PathLike) -> Saved:
    """The model saved at ``path`` (:func:`save`). Raises: FileNotFoundError, ValueError (:func:`from_json`)."""
    with open(path, encoding="utf-8") as fh:
        return from_json(fh.read(), str(path))
