"""Text encoders for retrieval (SPEC §7, §8): a checkpoint dir -> passage and query embeddings.

Two checkpoint kinds: PolicyBERT (``model_type="policybert"``; chars + vocabulary words, see
:mod:`retrieval.embed`) and a plain HF BERT sentence-embedding model (``model_type="bert"``: bge-base-zh-v1.5
with its WordPiece ``vocab.txt``, or multilingual-e5-small converted by :mod:`model.e5` with its
``tokenizer.json``). How a checkpoint embeds is recorded beside its weights in ``retrieval.json``
(:class:`RetrievalInfo`): pooling (``mean`` over the text's tokens, ``mean_all`` over every token incl.
[CLS]/[SEP] as e5 does, or ``cls``), instructions prepended to queries / passages, the window length,
and whether a longer text is cut to one window or embedded in consecutive windows. Without it,
PolicyBERT uses mean pooling and BERT CLS pooling (the bge convention), both without instruction.
Every encoder has the FlagEmbedding interface ``encode_queries(texts)`` / ``encode_corpus(texts)``;
all vectors are L2-normalised float32 (n, hidden), so inner product = cosine.
"""
from __future__ import annotations

import json
import os
from dataclasses import asdict, dataclass
from pathlib import Path
from typing import TYPE_CHECKING, Callable, Sequence

import numpy as np

from retrieval.encoding import WIDTH_MULTIPLE, padded_width, token_batches

if TYPE_CHECKING:
    from model.features import CharEncoder, WordMatcher
    from model.modeling import PolicyBertModel

RETRIEVAL_INFO = "retrieval.json"


@dataclass(frozen=True)
class RetrievalInfo:
    """pooling: ``mean`` | ``mean_all`` | ``cls`` (see :func:`pool`); query_instruction / passage_instruction:
    text prepended to every query / passage; max_len: tokens per window incl. [CLS]/[SEP]; windows: a
    longer text is embedded in consecutive windows whose pooled vectors are averaged weighted by their
    token counts (the e5 engine's convention) instead of being truncated to its first window."""

    pooling: str = "mean"
    query_instruction: str = ""
    max_len: int = 128
    passage_instruction: str = ""
    windows: bool = False

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


def load_encoder(ckpt_dir: str | os.PathLike) -> tuple[PolicyBertModel, CharEncoder, WordMatcher]:
    """The encoder (``PolicyBertModel``) of any PolicyBERT checkpoint, with its char encoder and word matcher
    (saved beside the weights, :func:`model.stages.load_inputs`)."""
    from model import PolicyBertModel
    from model.stages import load_inputs

    model = PolicyBertModel.from_pretrained(ckpt_dir)
    enc, matcher = load_inputs(ckpt_dir)
    return model, enc, matcher


class _Interface:
    """The FlagEmbedding interface (:class:`retrieval.encoding.TextEncoder`) over an ``embed(texts) -> (n,
    hidden)`` of the subclass; instructions from ``self.info``."""

    info: RetrievalInfo

    def embed(self, texts: Sequence[str]) -> np.ndarray:  # pragma: no cover - abstract
        raise NotImplementedError

    def encode_corpus(self, texts: Sequence[str]) -> np.ndarray:
        """Passage vectors, float32 (n, hidden), L2-normalised: the passage instruction prepended."""
        return self.embed([self.info.passage_instruction + t for t in texts])

    def encode_queries(self, texts: Sequence[str]) -> np.ndarray:
        """Query vectors, float32 (n, hidden), L2-normalised: the query instruction prepended."""
        return self.embed([self.info.query_instruction + t for t in texts])


class Encoder(_Interface):
    """A PolicyBERT encoder (mean-pooled or CLS, L2-normalised).

    ``encode_corpus(texts)`` embeds passages, ``encode_queries(texts)`` queries (instruction prepended);
    both return float32 (n, hidden).
    """

    def __init__(self, model, enc, matcher, batch_size: int = 64, device: str = "auto", on_progress=None,
                 info: RetrievalInfo | None = None, precision: str = "auto"):
        self.model, self.enc, self.matcher, self.on_progress = model, enc, matcher, on_progress
        self.batch_size, self.device, self.precision = batch_size, device, precision
        self.info = info or RetrievalInfo()
        self.max_len = min(self.info.max_len, self.model.config.max_position_embeddings)

    @classmethod
    def from_checkpoint(cls, ckpt_dir: str | os.PathLike, batch_size: int = 64, device: str = "auto",
                        precision: str | None = None):
        """The encoder of a checkpoint dir: PolicyBERT (any head) with its tokenizer and word vocab, or a
        plain BERT model (:class:`BertEncoder`). ``precision`` (:data:`model.training.PRECISIONS`; None: each
        kind's default, ``auto`` for PolicyBERT, ``fp32`` for BERT) sets the forward's autocast."""
        if checkpoint_type(ckpt_dir) == "bert":
            return BertEncoder.from_checkpoint(ckpt_dir, batch_size, device, precision=precision or "fp32")
        return cls(*load_encoder(ckpt_dir), batch_size=batch_size, device=device,
                   info=RetrievalInfo.load(ckpt_dir), precision=precision or "auto")

    @classmethod
    def untrained_like(cls, ckpt_dir: str | os.PathLike, seed: int = 13, precision: str | None = None):
        """Same architecture and inputs as ``ckpt_dir`` but randomly initialised (a baseline); ``precision`` as in
        :meth:`from_checkpoint` (None: the kind's default)."""
        import torch

        if checkpoint_type(ckpt_dir) == "bert":
            return BertEncoder.untrained_like(ckpt_dir, seed, precision=precision or "fp32")
        from model import PolicyBertModel

        model, enc, matcher = load_encoder(ckpt_dir)
        torch.manual_seed(seed)
        return cls(PolicyBertModel(model.config), enc, matcher, info=RetrievalInfo.load(ckpt_dir),
                   precision=precision or "auto")

    def embed(self, texts: Sequence[str]) -> np.ndarray:
        """Vectors of ``texts`` as given (no instruction), float32 (n, hidden), L2-normalised."""
        from retrieval.embed import embed_texts

        return embed_texts(self.model, self.enc, self.matcher, list(texts), max_len=self.max_len,
                           max_words=self.model.config.max_words, batch_size=self.batch_size, device=self.device,
                           on_progress=self.on_progress, pooling=self.info.pooling, precision=self.precision)


class BertEncoder(_Interface):
    """A plain HF BERT sentence encoder: bge-base-zh-v1.5 (WordPiece ``vocab.txt``, CLS pooling, texts cut to
    one window) or multilingual-e5-small from :mod:`model.e5` (SentencePiece ``tokenizer.json``, mean over
    all tokens, ``query: ``/``passage: ``, long texts in windows); L2-normalised."""

    def __init__(self, model, tokenizer, batch_size: int = 64, device: str = "auto", info: RetrievalInfo | None = None,
                 on_progress: Callable[[int, int], None] | None = None, precision: str = "fp32"):
        self.model, self.tokenizer, self.batch_size, self.device = model, tokenizer, batch_size, device
        self.precision = precision  # the forward's autocast (model.training.autocast); fp32: none, as shipped
        self.info = info or RetrievalInfo(pooling="cls", max_len=512)
        self.on_progress = on_progress

    @staticmethod
    def load_tokenizer(ckpt_dir: str | os.PathLike):
        """The checkpoint's fast tokenizer: ``tokenizer.json`` (with ``tokenizer_config.json``) when present,
        else WordPiece from ``vocab.txt`` (lower-cased, Chinese chars split)."""
        if Path(ckpt_dir, "tokenizer.json").is_file():
            from transformers import AutoTokenizer

            return AutoTokenizer.from_pretrained(str(ckpt_dir))
        from transformers import BertTokenizerFast

        # transformers 5 reads the WordPiece list from ``vocab=`` (``vocab_file=`` is ignored: every char [UNK])
        return BertTokenizerFast(vocab=str(Path(ckpt_dir, "vocab.txt")), do_lower_case=True,
                                 tokenize_chinese_chars=True)

    @classmethod
    def from_checkpoint(cls, ckpt_dir: str | os.PathLike, batch_size: int = 64, device: str = "auto",
                        precision: str = "fp32") -> "BertEncoder":
        """Load ``BertModel`` (no pooler: sentence vectors come from :func:`pool`) and its tokenizer."""
        from transformers import BertModel

        return cls(BertModel.from_pretrained(str(ckpt_dir), add_pooling_layer=False), cls.load_tokenizer(ckpt_dir),
                   batch_size, device, RetrievalInfo.load(ckpt_dir, "bert"), precision=precision)

    @classmethod
    def untrained_like(cls, ckpt_dir: str | os.PathLike, seed: int = 13, precision: str = "fp32") -> "BertEncoder":
        """Same config, random init (a baseline); ``precision``: the forward's autocast."""
        import torch
        from transformers import BertConfig, BertModel

        torch.manual_seed(seed)
        return cls(BertModel(BertConfig.from_pretrained(str(ckpt_dir)), add_pooling_layer=False),
                   cls.load_tokenizer(ckpt_dir), info=RetrievalInfo.load(ckpt_dir, "bert"), precision=precision)

    @property
    def window(self) -> int:
        """Tokens per window incl. [CLS]/[SEP] (``info.max_len`` capped by the model's positions)."""
        return min(self.info.max_len, self.model.config.max_position_embeddings)

    def batch(self, texts: Sequence[str]) -> dict:
        """Tokenized, padded, truncated batch (tensors) for ``texts`` (one window each)."""
        return dict(self.tokenizer(list(texts), padding=True, truncation=True, max_length=self.window,
                                   return_tensors="pt"))

    def windows(self, texts: Sequence[str]) -> tuple[list[list[int]], list[int]]:
        """(token ids of each window incl. [CLS]/[SEP], owning text of each window). A text's content ids
        are cut into runs of ``window - 2``: all runs when ``info.windows``, else the first."""
        tok, w = self.tokenizer, self.window - 2
        ids = tok(list(texts), add_special_tokens=False)["input_ids"] if len(texts) else []
        out, owner = [], []
        for i, seq in enumerate(ids):
            starts = range(0, max(len(seq), 1), w) if self.info.windows else [0]
            for a in starts:
                out.append([tok.cls_token_id, *seq[a:a + w], tok.sep_token_id])
                owner.append(i)
        return out, owner

    def embed(self, texts: Sequence[str]) -> np.ndarray:
        """Vectors of ``texts`` as given (no instruction), float32 (n, hidden), L2-normalised; windows of one
        text averaged weighted by their content token counts. Windows are batched by length, at most
        ``batch_size`` rows and :data:`retrieval.encoding.MAX_BATCH_TOKENS` padded positions a batch, each batch
        padded to a multiple of :data:`retrieval.encoding.WIDTH_MULTIPLE` positions (masked: the vectors do not
        depend on it beyond rounding)."""
        import torch

        from model.training import autocast, resolve_device

        dev = resolve_device(self.device)
        if dev.type == "cuda" and dev.index is None:
            dev = torch.device("cuda", torch.cuda.current_device())
        at = next(self.model.parameters()).device
        if at.type != dev.type or (dev.index is not None and at.index != dev.index):
            self.model.to(dev)  # .to() and .eval() walk every module: ~2 ms a query, so only when needed
        if self.model.training:
            self.model.eval()
        wins, owner = self.windows(texts)
        sums = np.zeros((len(texts), self.model.config.hidden_size), dtype=np.float64)
        pad, done = self.tokenizer.pad_token_id or 0, 0
        with torch.no_grad():
            for idx in token_batches([len(x) for x in wins], self.batch_size, multiple=WIDTH_MULTIPLE,
                                     cap=self.window):
                width = padded_width(max(len(wins[j]) for j in idx), WIDTH_MULTIPLE, self.window)
                ids = torch.full((len(idx), width), pad, dtype=torch.long)
                mask = torch.zeros((len(idx), width), dtype=torch.long)
                for r, j in enumerate(idx):
                    ids[r, :len(wins[j])], mask[r, :len(wins[j])] = torch.tensor(wins[j]), 1
                with autocast(dev, self.precision):
                    states = self.model(input_ids=ids.to(dev), attention_mask=mask.to(dev)).last_hidden_state.float()
                vecs = pool(states, mask.to(dev), self.info.pooling, normalize=False).cpu().numpy()
                for r, j in enumerate(idx):
                    sums[owner[j]] += vecs[r] * max(len(wins[j]) - 2, 1)
                done += len(idx)
                if self.on_progress is not None:
                    self.on_progress(done, len(wins))
        norms = np.linalg.norm(sums, axis=1, keepdims=True)
        return (sums / np.where(norms == 0, 1, norms)).astype(np.float32)


def pool(states, attention_mask, pooling: str = "cls", normalize: bool = True):
    """Sentence vectors (batch, hidden) from token states (batch, seq, hidden): ``cls`` = state 0,
    ``mean`` = mean over tokens without [CLS]/[SEP], ``mean_all`` = mean over every unmasked token incl.
    [CLS]/[SEP] (e5's average pooling, Wang et al. 2024); L2-normalised unless ``normalize`` is False.
    Differentiable (used in training).

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
    elif pooling == "mean_all":
        mask = attention_mask.float()
        v = (states * mask.unsqueeze(-1)).sum(1) / mask.sum(1, keepdim=True).clamp(min=1)
    else:
        raise ValueError(f"unknown pooling {pooling!r} (cls, mean, mean_all)")
    return torch.nn.functional.normalize(v, dim=-1) if normalize else v
