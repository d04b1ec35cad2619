"""A cross-encoder reranker for the query pipeline's rerank slot (SPEC §7, §9; the FlagEmbedding reranker
recipe: Xiao et al. 2023, "C-Pack", arXiv:2309.07597, and Nogueira & Cho 2019, "Passage Re-ranking with BERT").

:class:`CrossEncoder` reads ``[CLS] query [SEP] chunk [SEP]`` as the pinned encoder's own SentencePiece tokens
through the first ``layers`` transformer layers of the e5 body, pools the states (``mean`` over every token, as
e5 does, or ``cls``) and scores with a ``Linear(hidden, 1)`` head; :meth:`CrossEncoder.rerank` reorders the
search's top ``depth`` hits by that score (:class:`retrieval.pipeline.Reranker`).

Its **token embeddings are the pinned encoder's own** (frozen in training and not stored): the index version's
``reranker`` part holds only the fine-tuned rest (position/type embeddings and their LayerNorm, the ``layers``
layers, the head) in fp16 safetensors beside a JSON config naming the encoder id it reuses; loading refuses
another encoder (:class:`CrossEncoderMismatchError`). The body is initialised from a BERT-format checkpoint
(``init``: plain e5 today, any model on the e5 body later). Training (listwise softmax over one positive and
``negatives`` negatives per query, FlagEmbedding's ``CrossEncoder`` loss) is in :func:`train`, on the project's
one training engine (:func:`model.training.train`: the loss wrapped in a module, the groups in step order, the
config mapped by :func:`engine_config`); its data in :mod:`retrieval.rerank_data`; CLI
``python -m flows.train_reranker``.
"""
from __future__ import annotations

import copy
import dataclasses
import json
import os
import time
from dataclasses import asdict, dataclass
from pathlib import Path
from typing import TYPE_CHECKING, Callable, Mapping, Sequence

import numpy as np

if TYPE_CHECKING:
    from model.training import TrainConfig as EngineConfig

KIND = "cross-encoder"
CONFIG_FILE, WEIGHTS_FILE = "reranker.json", "reranker.safetensors"
WORD_EMBEDDINGS = "embeddings.word_embeddings.weight"


class CrossEncoderMismatchError(ValueError):
    """A cross-encoder part whose token embeddings belong to another encoder than the index version's."""


class CrossEncoderPartError(ValueError):
    """A cross-encoder part that is missing a file, unreadable, out of range, or whose weights changed."""


@dataclass(frozen=True)
class CrossEncoderConfig:
    """layers: transformer layers of the body used (1..the encoder's); max_len: tokens of ``[CLS] q [SEP] p
    [SEP]`` (16..512); max_query: query tokens kept (4..max_len/2); pooling: ``mean`` (every token, e5's) or
    ``cls``; depth: candidates reranked (1..1000); batch_size: pairs scored per forward pass; weight: the
    cross-encoder's share when its rank is fused with the search's by weighted reciprocal-rank fusion
    (Cormack et al. 2009; 1 = its order alone, 0..1); rrf_k: that fusion's rank offset; precision: the scoring
    forward's autocast (:data:`model.training.PRECISIONS`: ``fp32`` as trained and saved, ``bf16`` about twice
    as fast on a CPU with AVX512-BF16, scores within bf16 rounding).

    Raises:
        CrossEncoderPartError: a setting out of range (the message names it).
    """

    layers: int = 4
    max_len: int = 192
    max_query: int = 48
    pooling: str = "mean"
    depth: int = 20
    batch_size: int = 20
    weight: float = 1.0
    rrf_k: int = 60
    precision: str = "fp32"

    def __post_init__(self):
        from model.training import PRECISIONS

        if self.precision not in PRECISIONS:
            raise CrossEncoderPartError(f"cross-encoder: precision {self.precision!r} is not one of {PRECISIONS}")
        for name, lo, hi in (("layers", 1, 48), ("max_len", 16, 512), ("depth", 1, 1000), ("batch_size", 1, 4096),
                             ("max_query", 4, self.max_len // 2 if isinstance(self.max_len, int) else 8)):
            v = getattr(self, name)
            if isinstance(v, bool) or not isinstance(v, int) or not lo <= v <= hi:
                raise CrossEncoderPartError(f"cross-encoder: {name} = {v!r} is out of range ({lo}..{hi})")
        if isinstance(self.weight, bool) or not isinstance(self.weight, (int, float)) or not 0 <= self.weight <= 1:
            raise CrossEncoderPartError(f"cross-encoder: weight = {self.weight!r} is out of range (0..1)")
        if isinstance(self.rrf_k, bool) or not isinstance(self.rrf_k, int) or not 0 <= self.rrf_k <= 10_000:
            raise CrossEncoderPartError(f"cross-encoder: rrf_k = {self.rrf_k!r} is out of range (0..10000)")
        if self.pooling not in ("mean", "cls"):
            raise CrossEncoderPartError(f"cross-encoder: pooling {self.pooling!r} is not mean or cls")


def _torch():
    import torch

    return torch


def build_body(encoder_model, layers: int, init_state: Mapping | None = None):
    """A ``BertModel`` of the first ``layers`` layers of ``encoder_model`` (a transformers ``BertModel``),
    sharing its word-embedding module (frozen: ``requires_grad`` False), every other weight copied; then
    overwritten by the matching weights of ``init_state`` (a BERT state dict; a ``bert.``/``model.`` prefix
    is dropped; its word embeddings are ignored).

    Raises:
        CrossEncoderPartError: ``layers`` above the encoder's, or ``init_state`` of another shape.
    """
    from transformers import BertModel

    n = encoder_model.config.num_hidden_layers
    if layers > n:
        raise CrossEncoderPartError(f"cross-encoder: layers {layers} > the encoder's {n}")
    cfg = copy.deepcopy(encoder_model.config)
    cfg.num_hidden_layers = layers
    body = BertModel(cfg, add_pooling_layer=False)
    src = {k: v for k, v in encoder_model.state_dict().items() if k != WORD_EMBEDDINGS}
    body.load_state_dict({k: v for k, v in src.items() if k in body.state_dict()}, strict=False)
    if init_state is not None:
        _load_init(body, init_state)
    body.embeddings.word_embeddings = encoder_model.embeddings.word_embeddings
    body.embeddings.word_embeddings.weight.requires_grad_(False)
    return body


def init_weight_name(key: str) -> str | None:
    """The body weight a BERT-format checkpoint's ``key`` names (prefix ``bert.``/``model.`` dropped), or None
    for the token embeddings, which stay the pinned encoder's."""
    name = key.split(".", 1)[1] if key.startswith(("bert.", "model.")) else key
    return None if name == WORD_EMBEDDINGS else name


def _load_init(body, init_state: Mapping) -> None:
    """Copy every weight of ``init_state`` the body has (:func:`init_weight_name`)."""
    own = body.state_dict()
    picked = {}
    for k, v in init_state.items():
        name = init_weight_name(k)
        if name in own:
            if tuple(v.shape) != tuple(own[name].shape):
                raise CrossEncoderPartError(f"cross-encoder init: {name} has shape {tuple(v.shape)}, the body "
                                            f"{tuple(own[name].shape)}")
            picked[name] = v
    body.load_state_dict(picked, strict=False)


def read_init_state(init_dir: str | os.PathLike) -> dict:
    """The weights of a BERT-format checkpoint folder (``model.safetensors``) as a state dict, fp32.

    Raises:
        FileNotFoundError: no ``model.safetensors`` in ``init_dir``.
    """
    from safetensors.torch import load_file

    path = Path(init_dir, "model.safetensors")
    if not path.is_file():
        raise FileNotFoundError(f"cross-encoder init: no model.safetensors in {init_dir}")
    return {k: v.float() for k, v in load_file(str(path)).items()}


def _module_class():
    """The scoring module (defined lazily so that importing this file does not import torch)."""
    torch = _torch()

    class CrossEncoderModule(torch.nn.Module):
        """``body`` (a ``BertModel``) + ``head`` (``Linear(hidden, 1)``); ``forward(ids, mask)`` → scores
        (batch,) float32."""

        def __init__(self, body, pooling: str):
            super().__init__()
            self.body, self.pooling = body, pooling
            self.head = torch.nn.Linear(body.config.hidden_size, 1)
            torch.nn.init.normal_(self.head.weight, std=0.02)
            torch.nn.init.zeros_(self.head.bias)

        def forward(self, input_ids, attention_mask):
            from retrieval.encoders import pool

            states = self.body(input_ids=input_ids, attention_mask=attention_mask).last_hidden_state
            pooled = pool(states, attention_mask, "mean_all" if self.pooling == "mean" else "cls", normalize=False)
            return self.head(pooled).squeeze(-1)

    return CrossEncoderModule


def _get(hit, name: str):
    return hit[name] if isinstance(hit, Mapping) else getattr(hit, name)


def with_rerank_score(hit, score: float):
    """``hit`` with ``rerank_score`` set: ``dataclasses.replace`` for a dataclass hit, a copy for a dict.

    Raises:
        TypeError: a hit that is neither.
    """
    if dataclasses.is_dataclass(hit) and not isinstance(hit, type):
        extra = {"rerank_features": {}} if hasattr(hit, "rerank_features") else {}  # an earlier reranker's go
        return dataclasses.replace(hit, rerank_score=float(score), **extra)
    if isinstance(hit, Mapping):
        return {**hit, "rerank_score": float(score)}
    raise TypeError(f"cross-encoder: a hit must be a dict or a dataclass, not {type(hit).__name__}")


class CrossEncoder:
    """The reranker (:class:`retrieval.pipeline.Reranker`): ``module`` (body + head), ``tokenizer`` (the pinned
    encoder's), ``config`` (:class:`CrossEncoderConfig`), ``encoder_id`` (the content id of the encoder whose
    token embeddings the body reads, :func:`retrieval.pinning.model_id`), ``info`` (what it was trained on)."""

    name = KIND

    def __init__(self, module, tokenizer, config: CrossEncoderConfig, encoder_id: str, info: dict | None = None):
        self.module, self.tokenizer, self.config = module, tokenizer, config
        self.encoder_id, self.info = str(encoder_id), dict(info or {})
        self.depth = config.depth

    @classmethod
    def from_encoder(cls, encoder, encoder_id: str, config: CrossEncoderConfig = CrossEncoderConfig(),
                     init: str | os.PathLike | Mapping | None = None, seed: int = 13) -> "CrossEncoder":
        """A new cross-encoder on ``encoder`` (a :class:`retrieval.encoders.BertEncoder`: its ``model`` gives
        the body and the token embeddings, its ``tokenizer`` the pieces); ``init``: a checkpoint folder or
        state dict whose layers initialise the body (None: the encoder's own layers, plain e5); the head is
        seeded with ``seed``."""
        torch = _torch()
        state = read_init_state(init) if isinstance(init, (str, os.PathLike)) else init
        torch.manual_seed(seed)
        module = _module_class()(build_body(encoder.model, config.layers, state), config.pooling)
        return cls(module, encoder.tokenizer, config, encoder_id)

    def encode(self, queries: Sequence[str], passages: Sequence[str], max_len: int | None = None):
        """(input_ids, attention_mask) long tensors (n, width ≤ ``max_len``, default the config's) of
        ``[CLS] q [SEP] p [SEP]`` per pair: the query cut to ``max_query`` pieces, the passage to what is left."""
        torch, tok = _torch(), self.tokenizer
        c = dataclasses.replace(self.config, max_len=max_len) if max_len else self.config
        q_ids = tok(list(queries), add_special_tokens=False, truncation=True, max_length=c.max_query)["input_ids"]
        p_ids = tok(list(passages), add_special_tokens=False, truncation=True, max_length=c.max_len)["input_ids"]
        seqs = []
        for q, p in zip(q_ids, p_ids):  # both already cut by the tokenizer
            seqs.append([tok.cls_token_id, *q, tok.sep_token_id, *p[:c.max_len - len(q) - 3], tok.sep_token_id])
        width = max(len(s) for s in seqs)
        ids = torch.full((len(seqs), width), tok.pad_token_id or 0, dtype=torch.long)
        mask = torch.zeros((len(seqs), width), dtype=torch.long)
        for i, s in enumerate(seqs):
            ids[i, :len(s)], mask[i, :len(s)] = torch.tensor(s), 1
        return ids, mask

    def score(self, query: str, passages: Sequence[str]) -> np.ndarray:
        """Relevance scores (n,) float32 of ``passages`` for ``query`` (higher is better; raw logits)."""
        torch = _torch()
        if not len(passages):
            return np.zeros(0, dtype=np.float32)
        if self.module.training:
            self.module.eval()
        dev = next(self.module.parameters()).device  # the shared token embeddings may have moved with the encoder
        for p in self.module.parameters():
            if p.device != dev:
                self.module.to(dev)
                break
        from model.training import autocast

        out = []
        with torch.inference_mode(), autocast(dev, self.config.precision):
            for i in range(0, len(passages), self.config.batch_size):
                part = list(passages[i:i + self.config.batch_size])
                out.append(self.module(*(t.to(dev) for t in self.encode([query] * len(part), part)))
                           .float().cpu().numpy())
        return np.concatenate(out).astype(np.float32)

    def rerank(self, query: str, hits: list) -> list:
        """The first ``depth`` hits reordered by :meth:`score` of their ``text`` (:meth:`reorder`); hits past
        ``depth`` follow in the search's order, unchanged. Hits are dicts or dataclasses with ``doc_id, start,
        end, text, score``; their other fields are kept."""
        head = list(hits[:self.depth])
        return self.reorder(head, self.score(query, [str(_get(h, "text")) for h in head])) + list(hits[self.depth:])

    def reorder(self, hits: list, scores: np.ndarray, weight: float | None = None) -> list:
        """``hits`` (in the search's order) sorted by ``scores`` when ``weight`` (default the config's) is 1,
        else by ``(1 − weight)/(rrf_k + search rank) + weight/(rrf_k + score rank)`` (ranks 1-based); ties
        keep the search's order. Each gets ``rerank_score``: its score (weight 1) or that fused value."""
        w = self.config.weight if weight is None else weight
        if w >= 1:
            return [with_rerank_score(hits[i], scores[i]) for i in sorted(range(len(hits)), key=lambda i: -scores[i])]
        rank = np.empty(len(hits), dtype=int)
        rank[np.argsort(-np.asarray(scores), kind="stable")] = np.arange(1, len(hits) + 1)
        k = self.config.rrf_k
        fused = [(1 - w) / (k + i + 1) + w / (k + int(rank[i])) for i in range(len(hits))]
        return [with_rerank_score(hits[i], fused[i]) for i in sorted(range(len(hits)), key=lambda i: -fused[i])]

    def stored_state(self) -> dict:
        """The weights the part stores: every module weight but the (shared, frozen) token embeddings."""
        return {k: v for k, v in self.module.state_dict().items() if k != "body." + WORD_EMBEDDINGS}

    def save(self, out_dir: str | os.PathLike, weights_file: str = WEIGHTS_FILE) -> Path:
        """Write the part into ``out_dir``: ``weights_file`` (:meth:`stored_state` in fp16; another name than
        ``reranker.safetensors`` lets a version hold two cross-encoder parts, e.g. the search's and the answer
        stage's) and ``reranker.json`` (kind, config, encoder id, the weights' file and sha256,
        ``info.provenance``), each atomically, the JSON last. The in-memory weights are first rounded to fp16
        precision, so the saved reranker scores exactly as this one. Returns the JSON's path.

        Raises:
            CrossEncoderPartError: ``weights_file`` is not a plain ``<name>.safetensors`` file name."""
        import re
        from safetensors.torch import save as st_save

        from storage import atomic_write_bytes, atomic_write_text
        from storage.hashing import file_sha256

        if not re.fullmatch(r"[A-Za-z0-9_-]{1,64}\.safetensors", weights_file):
            raise CrossEncoderPartError(f"cross-encoder: weights file {weights_file!r} is not a plain "
                                        "'<name>.safetensors' file name")
        torch, out = _torch(), Path(out_dir)
        out.mkdir(parents=True, exist_ok=True)
        with torch.no_grad():
            for k, p in self.module.named_parameters():
                if k != "body." + WORD_EMBEDDINGS:
                    p.copy_(p.half().float())
        half = {k: v.detach().half().contiguous() for k, v in self.stored_state().items()}
        atomic_write_bytes(out / weights_file, st_save(half, metadata={"format": "pt"}))
        body = self.module.body.config
        doc = {"kind": KIND, **asdict(self.config), "encoder_model_id": self.encoder_id,
               "hidden_size": body.hidden_size, "vocab_size": body.vocab_size,
               "weights": {"file": weights_file, "sha256": file_sha256(out / weights_file), "dtype": "float16"},
               "info": {**self.info, "provenance": {"encoder_model_id": self.encoder_id, "segmenter": None}}}
        return atomic_write_text(out / CONFIG_FILE, json.dumps(doc, ensure_ascii=False, indent=1))


def read_part_config(path: str | os.PathLike) -> dict:
    """The JSON config of a cross-encoder part (``reranker.json``), checked: kind ``cross-encoder``, settings in
    range, an encoder id and a weights record.

    Raises:
        CrossEncoderPartError: missing, unreadable, another kind, or a setting out of range.
    """
    try:
        d = json.loads(Path(path).read_text(encoding="utf-8"))
    except FileNotFoundError:
        raise CrossEncoderPartError(f"cross-encoder part: {path} not found") from None
    except (OSError, ValueError, RecursionError) as exc:
        raise CrossEncoderPartError(f"cross-encoder part: {path} is not readable JSON ({str(exc)[:120]})") from None
    if not isinstance(d, dict) or d.get("kind") != KIND:
        raise CrossEncoderPartError(f"cross-encoder part: {path} is not of kind {KIND!r}")
    w = d.get("weights")
    if not isinstance(d.get("encoder_model_id"), str) or not isinstance(w, dict) \
            or not isinstance(w.get("file"), str) or not isinstance(w.get("sha256"), str):
        raise CrossEncoderPartError(f"cross-encoder part: {path} lacks encoder_model_id or its weights record")
    CrossEncoderConfig(**{f.name: d[f.name] for f in dataclasses.fields(CrossEncoderConfig) if f.name in d})
    return d


def _part_files(part) -> tuple[Path, Path | None]:
    """(config JSON, weights file or None = the one the JSON names beside it) of ``part``: a folder, the JSON
    path, or a (JSON, weights) pair."""
    if isinstance(part, (tuple, list)):
        return Path(part[0]), Path(part[1])
    p = Path(part)
    return (p / CONFIG_FILE, None) if p.is_dir() else (p, None)


def load_cross_encoder(part, encoder, encoder_id: str | None = None) -> CrossEncoder:
    """The cross-encoder of a part (``part``: its folder, its ``reranker.json``, or a (JSON, weights) pair) on
    ``encoder``: a loaded :class:`retrieval.encoders.BertEncoder` (its token embeddings are shared, not
    copied) with ``encoder_id`` (the index version's ``model_id``), or an encoder checkpoint folder (its id
    computed, :func:`retrieval.pinning.model_id`).

    Raises:
        CrossEncoderMismatchError: the part was trained on another encoder than ``encoder_id``.
        CrossEncoderPartError: a missing or unreadable file, weights changed since saving (sha256), settings
            out of range, or weights of another shape than the body.
    """
    from safetensors.torch import load_file

    from storage.hashing import file_sha256

    cfg_path, weights = _part_files(part)
    d = read_part_config(cfg_path)
    if isinstance(encoder, (str, os.PathLike)):
        from retrieval.encoders import BertEncoder
        from retrieval.pinning import model_id

        encoder_id = encoder_id or model_id(encoder)
        encoder = BertEncoder.from_checkpoint(encoder)
    if d["encoder_model_id"] != encoder_id:
        raise CrossEncoderMismatchError(
            f"cross-encoder part {cfg_path} reuses the token embeddings of encoder {d['encoder_model_id']}, "
            f"but this index version's encoder is {encoder_id}: train a reranker on this encoder "
            "(python -m flows.train_reranker) or serve the version it was trained with")
    weights = weights or cfg_path.parent / d["weights"]["file"]
    if not weights.is_file():
        raise CrossEncoderPartError(f"cross-encoder part: weights file {weights} is missing")
    if file_sha256(weights) != d["weights"]["sha256"]:
        raise CrossEncoderPartError(f"cross-encoder part: weights file {weights.name} changed since it was saved "
                                    "(sha256 mismatch)")
    config = CrossEncoderConfig(**{f.name: d[f.name] for f in dataclasses.fields(CrossEncoderConfig) if f.name in d})
    ce = CrossEncoder.from_encoder(encoder, encoder_id, config)
    state = {k: v.float() for k, v in load_file(str(weights)).items()}
    own = ce.stored_state()
    if set(state) != set(own) or any(tuple(state[k].shape) != tuple(own[k].shape) for k in own):
        raise CrossEncoderPartError(f"cross-encoder part: {weights.name} does not fit a {config.layers}-layer body "
                                    f"of this encoder")
    ce.module.load_state_dict(state, strict=False)
    ce.info = dict(d.get("info") or {})
    return ce


@dataclass(frozen=True)
class TrainConfig:
    """steps: optimiser steps (at most; ``max_seconds`` may stop earlier); batch: queries a step; negatives:
    negatives sampled per query (each group is 1 positive + ``negatives``; FlagEmbedding's ``train_group_size``
    − 1); lr / head_lr: AdamW learning rates of the body and the head, linear warm-up from 0 over ``warmup``
    steps then linear decay to 0 at ``steps``; max_seconds: wall-clock budget; seed: group order, negatives and
    dropout (the head's init is :meth:`CrossEncoder.from_encoder`'s); max_len: tokens of a training
    pair (None: the reranker's own; shorter trains faster, positions beyond it keep e5's embeddings);
    precision: the forward's autocast (:data:`model.training.PRECISIONS`; ``bf16`` halves a CPU step on
    AVX512-BF16, the weights and the optimiser stay float32); groups_per_forward: groups scored in one forward
    pass, padded to their longest pair (1 suits a CPU, where padding costs; a GPU wants the whole batch).

    Raises:
        ValueError: a setting out of range.
    """

    steps: int = 120
    batch: int = 4
    negatives: int = 7
    lr: float = 3e-5
    head_lr: float = 1e-3
    warmup: int = 10
    max_seconds: float = 600.0
    seed: int = 13
    max_len: int | None = None
    precision: str = "fp32"
    groups_per_forward: int = 1

    def __post_init__(self):
        from model.training import PRECISIONS
        from storage.bounds import check_choice

        check_choice(self, "precision", PRECISIONS)
        for name in ("steps", "batch", "negatives", "groups_per_forward"):
            if getattr(self, name) < 1:
                raise ValueError(f"TrainConfig.{name} must be >= 1, got {getattr(self, name)}")
        if not (self.lr > 0 and self.head_lr > 0 and self.max_seconds > 0 and self.warmup >= 0):
            raise ValueError("TrainConfig: lr, head_lr, max_seconds must be > 0 and warmup >= 0")


class StepGroups:
    """The examples of :func:`train` in step order, ``steps x batch`` of them: example ``i`` is group
    ``order[i mod n]`` as ``(query, [positive, negative, ...])`` with ``negatives`` negatives drawn for it (seeded
    per (seed, i), without replacement, with replacement when the group has fewer), ``order`` a permutation seeded
    with ``seed`` (``shuffle``) or the groups as given. Read in this order (``epoch_order``), so step s holds
    examples s·batch … s·batch + batch − 1: the groups cycled, every step ``batch`` of them."""

    def __init__(self, groups: Sequence, steps: int, batch: int, negatives: int, seed: int, shuffle: bool = True):
        self.groups, self.n, self.negatives, self.seed = groups, steps * batch, negatives, seed
        self.order = np.random.default_rng(seed).permutation(len(groups)) if shuffle else np.arange(len(groups))

    def __len__(self) -> int:
        return self.n

    def __getitem__(self, i: int) -> tuple[str, list[str]]:
        q, pos, negs = self.groups[self.order[i % len(self.order)]]
        idx = np.random.default_rng([self.seed, i]).choice(len(negs), self.negatives,
                                                           replace=len(negs) < self.negatives)
        return q, [pos, *(negs[j] for j in idx)]

    def epoch_order(self, seed: int, epoch: int) -> np.ndarray:
        """Step order (:func:`model.training.epoch_order`): the examples as indexed."""
        return np.arange(self.n)


def collate_groups(items: Sequence[tuple[str, list[str]]], ce: CrossEncoder, max_len: int | None = None) -> dict:
    """A training batch of :class:`StepGroups` examples: ``input_ids`` and ``attention_mask`` (groups x
    passages, width) of every ``[CLS] q [SEP] p [SEP]`` pair (:meth:`CrossEncoder.encode`), group after group,
    each group's positive first."""
    ids, mask = ce.encode([q for q, ps in items for _ in ps], [p for _, ps in items for p in ps], max_len)
    return {"input_ids": ids, "attention_mask": mask}


def _listwise_class():
    """The training module (defined lazily so that importing this file does not import torch)."""
    torch = _torch()
    from types import SimpleNamespace

    class ListwiseLoss(torch.nn.Module):
        """``module`` (a ``CrossEncoderModule``) under the listwise loss, for :func:`model.training.train`:
        ``forward(input_ids, attention_mask)`` (pairs of consecutive groups of ``group`` passages, the positive
        first) → ``.loss``, the mean over groups of the cross-entropy of the softmax over a group's scores with
        the positive as the target. Scored ``per_forward`` groups a forward pass, each pass cut to its own
        longest pair."""

        def __init__(self, module, group: int, per_forward: int):
            super().__init__()
            self.module, self.group, self.per_forward = module, group, per_forward

        def forward(self, input_ids, attention_mask):
            g, parts = self.group * self.per_forward, []
            for i in range(0, len(input_ids), g):
                mask = attention_mask[i:i + g]
                width = int(mask.sum(1).max())
                parts.append(self.module(input_ids[i:i + g, :width], mask[:, :width]))
            scores = torch.cat(parts).float().view(-1, self.group)
            target = torch.zeros(len(scores), dtype=torch.long, device=scores.device)
            return SimpleNamespace(loss=torch.nn.functional.cross_entropy(scores, target))

    return ListwiseLoss


def _step_log_class():
    """The progress callback of :func:`train` (defined lazily, as :func:`_listwise_class`)."""
    from model.training import Callback

    class StepLog(Callback):
        """Every step's loss in ``losses``; ``step s: loss L (t s)`` at step 1 and every 10th, L the mean of the
        last 10 steps, t the seconds since ``start``."""

        def __init__(self, log: Callable[[str], None], start: float):
            self.log, self.start, self.losses = log, start, []

        def on_step(self, loop) -> None:
            self.losses.append(loop.state.losses[-1])
            step = loop.state.step
            if step % 10 == 0 or step == 1:
                self.log(f"step {step}: loss {np.mean(self.losses[-10:]):.4f} "
                         f"({time.perf_counter() - self.start:.0f} s)")

    return StepLog


def engine_config(cfg: TrainConfig, device) -> EngineConfig:
    """``cfg`` on the training engine (:class:`model.training.TrainConfig`): ``steps`` optimiser steps of
    ``batch`` groups, warm-up of ``warmup`` steps then linear decay to 0, AdamW (weight decay 0.01; none on
    biases and LayerNorms), the head at ``head_lr`` (``lr_scales`` of the ``module.head`` prefix), gradient
    norm clipped at 1, on ``device`` (the module's), no worker processes (collation tokenises), no state saved."""
    from model.training import TrainConfig as EngineConfig

    return EngineConfig(max_steps=cfg.steps, batch_size=cfg.batch, lr=cfg.lr, warmup_steps=cfg.warmup,
                        weight_decay=0.01, seed=cfg.seed, device="cpu" if device.type == "cpu" else str(device),
                        log_every=10, save_every=0, num_workers=0, precision=cfg.precision,
                        lr_scales=f"module.head={cfg.head_lr / cfg.lr!r}")


def train(ce: CrossEncoder, groups: Sequence[tuple[str, str, Sequence[str]]], cfg: TrainConfig = TrainConfig(),
          log: Callable[[str], None] = print, shuffle: bool = True) -> dict:
    """Fine-tune ``ce`` in place on ``groups`` (query, positive passage, negative passages) on the training engine
    (:func:`model.training.train`, :func:`engine_config`): per step the next ``batch`` groups (in a seeded random
    order, or as given without ``shuffle``; cycled; :class:`StepGroups`), loss = cross-entropy of the softmax over
    each group's scores with the positive as the target (the listwise loss of FlagEmbedding's reranker), until
    ``steps`` or ``max_seconds`` (:class:`model.training.TimeBudget`). The token embeddings stay frozen; the
    module ends in eval mode. Returns ``{steps, seconds, loss_first, loss_last, pairs_per_second}`` (losses: the
    mean of the first / last 10 steps' listwise losses, nats).

    Raises:
        ValueError: no group has a negative.
    """
    from functools import partial

    from model.training import TimeBudget, train as run

    groups = [g for g in groups if len(g[2])]
    if not groups:
        raise ValueError("cross-encoder training: no query has a negative passage")
    m = ce.module
    budget = TimeBudget(cfg.max_seconds)
    steps = _step_log_class()(log, budget.start)
    run(_listwise_class()(m, cfg.negatives + 1, cfg.groups_per_forward),
        StepGroups(groups, cfg.steps, cfg.batch, cfg.negatives, cfg.seed, shuffle),
        partial(collate_groups, ce=ce, max_len=cfg.max_len), engine_config(cfg, next(m.parameters()).device),
        log=lambda _: None, callbacks=[budget, steps])  # the engine's own lines: StepLog's replace them
    m.eval()
    secs, n = time.perf_counter() - budget.start, len(steps.losses)
    return {"steps": n, "seconds": round(secs, 1), "loss_first": float(np.mean(steps.losses[:10])),
            "loss_last": float(np.mean(steps.losses[-10:])),
            "pairs_per_second": round(n * cfg.batch * (cfg.negatives + 1) / max(secs, 1e-9), 2)}
