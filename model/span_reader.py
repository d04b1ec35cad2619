"""A neural extractive span reader (SPEC §9): a BERT body (the e5 encoder, :mod:`model.e5`) with a start/end
linear head over (question, passage window) pairs; the [CLS] position (index 0) is the null "no answer"
span (Devlin et al. 2019, "BERT", SQuAD 2.0 head). Long documents are read in overlapping windows of at most
``max_len`` tokens with ``doc_stride`` tokens of overlap; a span's score is start logit + end logit, the null
score the smallest [CLS] start+end over the windows, and :meth:`SpanReader.predict` returns spans scored by
their margin over it (> 0: the reader answers).

Transformers conventions: :class:`SpanReaderConfig` (a ``BertConfig`` plus ``max_len``, ``doc_stride``,
``max_answer_chars``), ``save_pretrained``/``from_pretrained``; :func:`load_reader` also loads the tokenizer
saved beside the weights.
"""
from __future__ import annotations

from dataclasses import dataclass

import torch
from torch import nn
from transformers import AutoTokenizer, BertConfig, BertModel, PreTrainedModel
from transformers.modeling_outputs import QuestionAnsweringModelOutput

__all__ = ["SpanReaderConfig", "SpanReader", "Window", "encode_windows", "load_reader", "train_features"]


class SpanReaderConfig(BertConfig):
    """``BertConfig`` plus the reader's reading budget: ``max_len`` tokens a window (≤ 512), ``doc_stride``
    tokens of overlap between windows, ``max_answer_chars`` the longest answer in chars."""

    model_type = "span_reader"

    def __init__(self, max_len: int = 256, doc_stride: int = 64, max_answer_chars: int = 64, **kw):
        super().__init__(**kw)
        self.max_len, self.doc_stride, self.max_answer_chars = max_len, doc_stride, max_answer_chars


@dataclass
class Window:
    """One encoded window: token ids etc. (1-D lists of one length ≤ max_len) and, per token, the (start, end)
    chars of the document it covers or None for question/special tokens."""

    input_ids: list
    attention_mask: list
    offsets: list


def encode_windows(tokenizer, question: str, text: str, max_len: int, stride: int) -> list[Window]:
    """(question, text) as windows over ``text`` of at most ``max_len`` tokens, ``stride`` tokens overlapping
    (a fast tokenizer's overflow); offsets of question and special tokens are None.

    Raises:
        ValueError: the question leaves no room for the passage (question tokens ≥ max_len - 8).
    """
    q_len = len(tokenizer(question, add_special_tokens=False)["input_ids"])
    if q_len >= max_len - 8:
        raise ValueError(f"question of {q_len} tokens leaves no room in max_len={max_len}")
    enc = tokenizer(question, text, truncation="only_second", max_length=max_len, stride=stride,
                    return_overflowing_tokens=True, return_offsets_mapping=True, padding=False)
    out = []
    for i in range(len(enc["input_ids"])):
        seq = enc.sequence_ids(i)
        offs = [tuple(o) if s == 1 and o[1] > o[0] else None for o, s in zip(enc["offset_mapping"][i], seq)]
        out.append(Window(enc["input_ids"][i], enc["attention_mask"][i], offs))
    return out


def _span_tokens(offsets: list, start: int, end: int) -> tuple[int, int]:
    """(start token, end token) covering chars [start, end) in the window, or (0, 0) when not inside it."""
    ts = te = None
    for j, o in enumerate(offsets):
        if o is None:
            continue
        if ts is None and o[0] <= start < o[1]:
            ts = j
        if o[0] < end <= o[1]:
            te = j
    if ts is None or te is None or te < ts:
        return 0, 0
    return ts, te


def train_features(tokenizer, examples, max_len: int, stride: int, null_keep: float = 0.1, rng=None) -> list:
    """Training windows of ``examples`` ((question, text, answer_start, answer_end) chars; start == end ==
    -1: unanswerable) as dicts (input_ids, attention_mask, start_positions, end_positions); windows without
    the answer point at [CLS] (0) and are kept with probability ``null_keep`` (``rng``: a ``random.Random``)."""
    import random

    rng = rng or random.Random(0)
    feats = []
    for q, text, a, b in examples:
        for w in encode_windows(tokenizer, q, text, max_len, stride):
            s, e = _span_tokens(w.offsets, a, b) if a >= 0 else (0, 0)
            if s == 0 and rng.random() > null_keep:
                continue
            feats.append({"input_ids": w.input_ids, "attention_mask": w.attention_mask,
                          "start_positions": s, "end_positions": e})
    return feats


def collate(feats: list, pad_id: int) -> dict:
    """Pads a list of :func:`train_features` dicts into a batch of tensors ``(B, T)`` / ``(B,)``."""
    T = max(len(f["input_ids"]) for f in feats)
    ids = torch.full((len(feats), T), pad_id, dtype=torch.long)
    mask = torch.zeros((len(feats), T), dtype=torch.long)
    for i, f in enumerate(feats):
        ids[i, :len(f["input_ids"])] = torch.tensor(f["input_ids"])
        mask[i, :len(f["input_ids"])] = 1
    out = {"input_ids": ids, "attention_mask": mask}
    if "start_positions" in feats[0]:
        out["start_positions"] = torch.tensor([f["start_positions"] for f in feats])
        out["end_positions"] = torch.tensor([f["end_positions"] for f in feats])
    return out


class SpanReader(PreTrainedModel):
    """BERT body + ``nn.Linear(hidden, 2)`` start/end head. ``forward`` → ``QuestionAnsweringModelOutput``
    (start/end logits ``(B, T)``, padding at -1e4; ``loss`` the mean start/end cross-entropy when positions are
    given, position 0 = no answer)."""

    config_class = SpanReaderConfig
    base_model_prefix = "bert"

    def __init__(self, config: SpanReaderConfig):
        super().__init__(config)
        self.bert = BertModel(config, add_pooling_layer=False)
        self.qa = nn.Linear(config.hidden_size, 2)
        self.tokenizer = None
        self.post_init()

    def _init_weights(self, module):
        if isinstance(module, nn.Linear):
            module.weight.data.normal_(0.0, self.config.initializer_range)
            if module.bias is not None:
                module.bias.data.zero_()
        elif isinstance(module, nn.Embedding):
            module.weight.data.normal_(0.0, self.config.initializer_range)
        elif isinstance(module, nn.LayerNorm):
            module.weight.data.fill_(1.0)
            module.bias.data.zero_()

    def forward(self, input_ids, attention_mask=None, token_type_ids=None, start_positions=None,
                end_positions=None):
        h = self.bert(input_ids=input_ids, attention_mask=attention_mask,
                      token_type_ids=token_type_ids).last_hidden_state
        logits = self.qa(h)
        s, e = logits[..., 0], logits[..., 1]
        if attention_mask is not None:
            s = s.masked_fill(attention_mask == 0, -1e4)
            e = e.masked_fill(attention_mask == 0, -1e4)
        loss = None
        if start_positions is not None:
            ce = nn.CrossEntropyLoss()
            loss = (ce(s, start_positions) + ce(e, end_positions)) / 2
        return QuestionAnsweringModelOutput(loss=loss, start_logits=s, end_logits=e)

    @torch.no_grad()
    def predict(self, question: str, text: str, top_n: int = 5, tokenizer=None,
                max_answer_chars: int | None = None, batch: int = 16) -> list[tuple[int, int, float]]:
        """The ``top_n`` best spans of ``text`` for ``question`` across its windows as (start_char, end_char,
        score), best first; score = span logit sum minus the null ([CLS]) score, so > 0 means the reader
        prefers the span to "no answer". Spans are at most ``max_answer_chars`` chars (config default).

        Raises:
            ValueError: no tokenizer (pass one or use :func:`load_reader`), or the question is too long.
        """
        tok = tokenizer or self.tokenizer
        if tok is None:
            raise ValueError("SpanReader.predict needs a tokenizer (load_reader attaches the saved one)")
        limit = max_answer_chars or self.config.max_answer_chars
        wins = encode_windows(tok, question, text, self.config.max_len, self.config.doc_stride)
        self.eval()
        best, null = {}, float("inf")
        for i in range(0, len(wins), batch):
            part = wins[i:i + batch]
            b = collate([{"input_ids": w.input_ids} for w in part], tok.pad_token_id or 0)
            out = self(b["input_ids"], b["attention_mask"])
            for w, s, e in zip(part, out.start_logits, out.end_logits):
                null = min(null, float(s[0] + e[0]))
                _window_spans(w, s, e, limit, best)
        ranked = sorted(best.items(), key=lambda kv: -kv[1])[:top_n]
        return [(a, b_, sc - null) for (a, b_), sc in ranked]


def _window_spans(w: Window, s, e, limit: int, best: dict, k: int = 20) -> None:
    """Adds the window's valid spans (both ends in the passage, end ≥ start, ≤ ``limit`` chars) from the top
    ``k`` starts × top ``k`` ends to ``best`` {(start_char, end_char): best score}."""
    n = len(w.offsets)
    ss = torch.topk(s[:n], min(k, n)).indices.tolist()
    es = torch.topk(e[:n], min(k, n)).indices.tolist()
    for i in ss:
        if w.offsets[i] is None:
            continue
        for j in es:
            if j < i or w.offsets[j] is None:
                continue
            a, b = w.offsets[i][0], w.offsets[j][1]
            if b - a > limit:
                continue
            sc = float(s[i] + e[j])
            if sc > best.get((a, b), -float("inf")):
                best[(a, b)] = sc


def load_reader(folder) -> SpanReader:
    """A saved :class:`SpanReader` with its tokenizer (saved beside it) attached, in eval mode, computing in
    float32 whatever precision it was saved in (``flows.train_reader`` saves fp16; fp16 matrix products on a
    CPU are ~10x slower: 30 sequences of 41 tokens through 4 of e5-small's layers took 1.12 s in fp16 and
    0.12 s in float32 on 2 cores).

    Raises:
        OSError: the folder holds no reader checkpoint or tokenizer.
    """
    model = SpanReader.from_pretrained(str(folder), dtype=torch.float32)
    model.tokenizer = AutoTokenizer.from_pretrained(str(folder))
    return model.eval()
