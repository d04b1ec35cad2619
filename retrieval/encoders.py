"""Text encoders for retrieval (SPEC §7, issue 12): a checkpoint dir -> passage and query embeddings.

Two checkpoint kinds: PolicyBERT (``model_type="policybert"``; chars + vocabulary words, see
:mod:`retrieval.embed`) and a plain HF BERT sentence-embedding model (``model_type="bert"``, e.g.
bge-base-zh-v1.5; WordPiece tokenizer from its ``vocab.txt``). How a checkpoint embeds is recorded
beside its weights in ``retrieval.json`` (:class:`RetrievalInfo`): pooling (``mean`` over the text's
tokens or ``cls``), a query instruction prepended to queries only, the window length. Without it,
PolicyBERT uses mean pooling and BERT CLS pooling (the bge convention), both without instruction.
All vectors are L2-normalised float32, so inner product = cosine.
"""
from __future__ import annotations

import json
import os
from dataclasses import asdict, dataclass
from pathlib import Path
from typing import Callable, Sequence

import numpy as np

RETRIEVAL_INFO = "retrieval.json"


@dataclass(frozen=True)
class RetrievalInfo:
    """pooling: ``mean`` | ``cls``; query_instruction: text prepended to every query (not to passages);
    max_len: tokens per window incl. [CLS]/[SEP]."""

    pooling: str = "mean"
    query_instruction: str = ""
    max_len: int = 128

    def save(self, ckpt_dir: str | os.PathLike) -> None:
        """Write ``retrieval.json`` into ``ckpt_dir``."""
        Path(ckpt_dir, RETRIEVAL_INFO).write_text(json.dumps(asdict(self), ensure_ascii=False, indent=1),
                                                  encoding="utf-8")

    @classmethod
    def load(cls, ckpt_dir: str | os.PathLike, model_type: str = "policybert") -> "RetrievalInfo":
        """``retrieval.json`` of ``ckpt_dir``, else the default of ``model_type`` (bert: CLS, 512 tokens)."""
        p = Path(ckpt_dir, RETRIEVAL_INFO)
        if p.is_file():
            return cls(**json.loads(p.read_text(encoding="utf-8")))
        return cls(pooling="cls", max_len=512) if model_type == "bert" else cls()


def checkpoint_type(ckpt_dir: str | os.PathLike) -> str:
    """``model_type`` from ``config.json``.

    Raises:
        FileNotFoundError: no config.json in ``ckpt_dir``.
    """
    return json.loads(Path(ckpt_dir, "config.json").read_text(encoding="utf-8")).get("model_type", "")


class Encoder:
    """A PolicyBERT encoder as a text -> vector function (mean-pooled or CLS, L2-normalised).

    ``encoder(texts)`` embeds passages, ``encoder.queries(texts)`` queries (instruction prepended);
    both return float32 (n, hidden).
    """

    def __init__(self, model, enc, matcher, batch_size: int = 64, device: str = "auto", on_progress=None,
                 info: RetrievalInfo | None = None):
        self.model, self.enc, self.matcher, self.on_progress = model, enc, matcher, on_progress
        self.batch_size, self.device = batch_size, device
        self.info = info or RetrievalInfo()
        self.max_len = min(self.info.max_len, self.model.config.max_position_embeddings)

    @classmethod
    def from_checkpoint(cls, ckpt_dir: str | os.PathLike, batch_size: int = 64, device: str = "auto"):
        """The encoder of a checkpoint dir: PolicyBERT (any head) with its tokenizer and word vocab, or a
        plain BERT model (:class:`BertEncoder`)."""
        if checkpoint_type(ckpt_dir) == "bert":
            return BertEncoder.from_checkpoint(ckpt_dir, batch_size, device)
        from model.stages import load_encoder

        return cls(*load_encoder(ckpt_dir), batch_size=batch_size, device=device,
                   info=RetrievalInfo.load(ckpt_dir))

    @classmethod
    def untrained_like(cls, ckpt_dir: str | os.PathLike, seed: int = 13):
        """Same architecture and inputs as ``ckpt_dir`` but randomly initialised (a baseline)."""
        import torch

        if checkpoint_type(ckpt_dir) == "bert":
            return BertEncoder.untrained_like(ckpt_dir, seed)
        from model import PolicyBertModel
        from model.stages import load_encoder

        model, enc, matcher = load_encoder(ckpt_dir)
        torch.manual_seed(seed)
        return cls(PolicyBertModel(model.config), enc, matcher, info=RetrievalInfo.load(ckpt_dir))

    def __call__(self, texts: list[str]) -> np.ndarray:
        from retrieval.embed import embed_texts

        return embed_texts(self.model, self.enc, self.matcher, texts, max_len=self.max_len,
                           max_words=self.model.config.max_words, batch_size=self.batch_size, device=self.device,
                           on_progress=self.on_progress, pooling=self.info.pooling)

    def queries(self, texts: Sequence[str]) -> np.ndarray:
        """Query vectors (n, hidden): the instruction prepended, then embedded like passages."""
        return self([self.info.query_instruction + t for t in texts])


class BertEncoder:
    """A plain HF BERT sentence encoder (e.g. bge-base-zh-v1.5): WordPiece, CLS or mean pooling,
    L2-normalised; texts longer than the window are truncated (bge's convention)."""

    def __init__(self, model, tokenizer, batch_size: int = 64, device: str = "auto", info: RetrievalInfo | None = None,
                 on_progress: Callable[[int, int], None] | None = None):
        self.model, self.tokenizer, self.batch_size, self.device = model, tokenizer, batch_size, device
        self.info = info or RetrievalInfo(pooling="cls", max_len=512)
        self.on_progress = on_progress

    @staticmethod
    def load_tokenizer(ckpt_dir: str | os.PathLike):
        """The checkpoint's WordPiece tokenizer (``vocab.txt``, lower-cased, Chinese chars split)."""
        from transformers import BertTokenizerFast

        return BertTokenizerFast(vocab_file=str(Path(ckpt_dir, "vocab.txt")), do_lower_case=True,
                                 tokenize_chinese_chars=True)

    @classmethod
    def from_checkpoint(cls, ckpt_dir: str | os.PathLike, batch_size: int = 64, device: str = "auto") -> "BertEncoder":
        """Load ``BertModel`` and its tokenizer from ``ckpt_dir``."""
        from transformers import BertModel

        return cls(BertModel.from_pretrained(str(ckpt_dir)), cls.load_tokenizer(ckpt_dir), batch_size, device,
                   RetrievalInfo.load(ckpt_dir, "bert"))

    @classmethod
    def untrained_like(cls, ckpt_dir: str | os.PathLike, seed: int = 13) -> "BertEncoder":
        """Same config, random init (a baseline)."""
        import torch
        from transformers import BertConfig, BertModel

        torch.manual_seed(seed)
        return cls(BertModel(BertConfig.from_pretrained(str(ckpt_dir))), cls.load_tokenizer(ckpt_dir),
                   info=RetrievalInfo.load(ckpt_dir, "bert"))

    def batch(self, texts: Sequence[str]) -> dict:
        """Tokenized, padded, truncated batch (tensors) for ``texts``."""
        max_len = min(self.info.max_len, self.model.config.max_position_embeddings)
        return dict(self.tokenizer(list(texts), padding=True, truncation=True, max_length=max_len,
                                   return_tensors="pt"))

    def __call__(self, texts: list[str]) -> np.ndarray:
        import torch

        from model.training import resolve_device

        dev = resolve_device(self.device)
        self.model.to(dev).eval()
        out = np.zeros((len(texts), self.model.config.hidden_size), dtype=np.float32)
        order = np.argsort([len(t) for t in texts], kind="stable")
        with torch.no_grad():
            for i in range(0, len(order), self.batch_size):
                idx = order[i:i + self.batch_size]
                b = {k: v.to(dev) for k, v in self.batch([texts[j] for j in idx]).items()}
                states = self.model(**b).last_hidden_state.float()
                out[idx] = pool(states, b["attention_mask"], self.info.pooling).cpu().numpy()
                if self.on_progress is not None:
                    self.on_progress(min(i + self.batch_size, len(order)), len(order))
        return out

    def queries(self, texts: Sequence[str]) -> np.ndarray:
        """Query vectors: the instruction prepended."""
        return self([self.info.query_instruction + t for t in texts])


def pool(states, attention_mask, pooling: str = "cls"):
    """Sentence vectors (batch, hidden) from token states (batch, seq, hidden): ``cls`` = state 0,
    ``mean`` = mean over tokens without [CLS]/[SEP]; L2-normalised. Differentiable (used in training).

    Raises:
        ValueError: unknown pooling.
    """
    import torch

    if pooling == "cls":
        v = states[:, 0]
    elif pooling == "mean":
        mask = attention_mask.clone().float()
        mask[:, 0] = 0
        lengths = attention_mask.sum(1)
        mask[torch.arange(len(mask), device=mask.device), lengths - 1] = 0
        v = (states * mask.unsqueeze(-1)).sum(1) / mask.sum(1, keepdim=True).clamp(min=1)
    else:
        raise ValueError(f"unknown pooling {pooling!r} (cls, mean)")
    return torch.nn.functional.normalize(v, dim=-1)
