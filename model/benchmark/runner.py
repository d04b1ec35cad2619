"""Fine-tune and evaluate one model on one benchmark task (SPEC §10) with the project's training loop
(:func:`model.training.train`: AdamW, warmup + linear decay, best-by-dev weights; CUDA + bf16 autocast when a
GPU is present).

Models (``variant``):
- ``plain``: transformers' ``BertForTokenClassification`` / ``BertForSequenceClassification`` on a BERT
  checkpoint (config ``model_type`` bert), chars only;
- ``none`` | ``gate`` | ``attn``: PolicyBERT with that fusion. From a PolicyBERT checkpoint: its own weights
  (the checkpoint's fusion only). From a BERT checkpoint: the char encoder, embeddings and pooler are the BERT
  body (:func:`model.backbones.init_from_backbones`), the word layers start as copies of the first char layers
  and each word's embedding as the mean of its chars' embeddings; the fusion layers are new.

QV-attention (SPEC §11): a budget with ``qv_layers = N > 0`` puts Query-Value attention
(:mod:`model.qv_attention`) into the last N char layers of any row's model on the sequence tasks (DC, SA, SPM);
``config.qv_layers`` / ``qv_init`` / ``qv_gate_bias`` are saved with the model and :func:`load_finetuned`
rebuilds it exactly.

Budgets (:data:`BUDGETS`): ``cpu-small`` caps train rows (2,000), steps (375 of 16, dev every 125) and length
(64), and trains only e5's top 8 of 12 layers above a frozen bottom computed once per example
(:mod:`model.benchmark.frozen`), at lr 2e-4 with the new head at 30x (ULMFiT's discriminative rates), so SA,
NER and SPM x plain + gate x 3 seeds fit 2 CPU cores in under an hour and a half;
``cpu-4layer`` is the earlier cap (the body cut to its first 4 layers, 125 steps; the QV-attention runs);
``gpu-base`` is the thesis's fine-tuning (full sets, 3 epochs,
batch 32, lr 5e-5, max length 128, every layer).
"""
from __future__ import annotations

import json
import os
import time
from dataclasses import asdict, dataclass, replace
from pathlib import Path
from typing import Callable, Sequence

import torch

from model.benchmark.data import Splits, cap
from model.benchmark.inputs import Collator, char_predictions, encode_split, token_rows
from model.benchmark.metrics import task_scores
from model.features import CharEncoder, WordMatcher
from model.backbones import init_word_encoder

VARIANTS = ("plain", "none", "gate", "attn")


@dataclass(frozen=True)
class Budget:
    """A fine-tuning budget: train rows (``max_train``, None = all), dev/test rows (``max_eval``), optimiser
    steps (``max_steps``, None = ``epochs`` decide), batch size, learning rate, max sequence length in chars,
    char layers kept from the backbone (``layers``, None = all), word layers of a new word encoder, words per
    example, evaluations per run (dev at each epoch end, or every ``eval_every`` steps), device, and QV-attention
    on the last ``qv_layers`` char layers of sequence-task models (0 = off; initialisation ``qv_init``, ``rezero``
    or ``gate-bias``, gate bias ``qv_gate_bias``, None = the init's own, rezero's learning-rate multiplier on
    ``γ`` ``qv_gamma_scale``; SPEC §11, :mod:`model.qv_attention`), and ``frozen_layers``: the bottom char layers
    kept frozen and computed once per example (:mod:`model.benchmark.frozen`; PolicyBERT's word side then runs
    beside the layers above them, ``fusion_start``; 0 = every layer trains), and ``head_lr_scale``: the new
    task head (``classifier``) trains at ``lr x head_lr_scale`` (:attr:`model.training.TrainConfig.lr_scales`)."""

    name: str
    max_train: int | None
    max_eval: int | None
    epochs: int
    max_steps: int | None
    batch_size: int
    lr: float
    max_len: int
    layers: int | None
    word_layers: int
    max_words: int = 40
    eval_every: int = 0
    device: str = "auto"
    word_add_above: bool = True
    qv_layers: int = 0
    qv_gate_bias: float | None = None
    qv_init: str = "rezero"
    qv_gamma_scale: float = 100.0
    frozen_layers: int = 0
    head_lr_scale: float = 1.0

    def describe(self) -> str:
        """One line for the table: the caps of this budget."""
        return (f"{self.name}: train <= {self.max_train or 'all'} rows, dev/test <= {self.max_eval or 'all'}, "
                f"{f'{self.max_steps} steps' if self.max_steps else f'{self.epochs} epochs'}, batch {self.batch_size}, "
                f"lr {self.lr:g}, max len {self.max_len}, char layers {self.layers or 'all'}, "
                f"word layers {self.word_layers}"
                + (f", bottom {self.frozen_layers} char layers frozen and precomputed" if self.frozen_layers else "")
                + (f", head lr x{self.head_lr_scale:g}" if self.head_lr_scale != 1 else "")
                + ("" if self.word_add_above else ", words fused in word layers only")
                + (f", QV-attention on the last {self.qv_layers} layer(s) ({self._qv_init_text()})"
                   if self.qv_layers else ""))

    def _qv_init_text(self) -> str:
        from model.qv_attention import INIT_GATE_BIAS

        bias = INIT_GATE_BIAS.get(self.qv_init, 0.0) if self.qv_gate_bias is None else self.qv_gate_bias
        if self.qv_init == "rezero":
            return f"rezero init, gamma lr x{self.qv_gamma_scale:g}, gate bias {bias:g}"
        return f"gate bias {bias:g}"


BUDGETS: dict[str, Budget] = {
    "cpu-small": Budget("cpu-small", max_train=2000, max_eval=1000, epochs=1, max_steps=375, batch_size=16,
                        lr=2e-4, max_len=64, layers=None, word_layers=1, max_words=24, eval_every=125, device="cpu",
                        frozen_layers=4, head_lr_scale=30.0),
    "cpu-4layer": Budget("cpu-4layer", max_train=2000, max_eval=1000, epochs=1, max_steps=125, batch_size=16,
                         lr=1e-4, max_len=64, layers=4, word_layers=1, max_words=24, device="cpu"),
    "gpu-base": Budget("gpu-base", max_train=None, max_eval=None, epochs=3, max_steps=None, batch_size=32,
                       lr=5e-5, max_len=128, layers=None, word_layers=2, max_words=40, device="auto"),
    "tiny": Budget("tiny", max_train=24, max_eval=16, epochs=1, max_steps=3, batch_size=8, lr=1e-3, max_len=32,
                   layers=None, word_layers=1, max_words=8, device="cpu"),
}


def model_type(model_dir: str | os.PathLike) -> str:
    """``model_type`` of a checkpoint's ``config.json`` (``bert`` or ``policybert``).

    Raises:
        FileNotFoundError: no config.json.
    """
    return json.loads((Path(model_dir) / "config.json").read_text(encoding="utf-8"))["model_type"]


def variants_for(model_dir: str | os.PathLike, fusions: list[str]) -> list[str]:
    """The model rows a checkpoint yields: a BERT checkpoint gives ``plain`` and every requested fusion
    (PolicyBERT on its body); a PolicyBERT checkpoint gives its own fusion only (another fusion would start
    from untrained fusion weights under a trained name)."""
    mt = model_type(model_dir)
    if mt == "bert":
        return ["plain"] + [f for f in fusions if f != "plain"]
    cfg = json.loads((Path(model_dir) / "config.json").read_text(encoding="utf-8"))
    return [cfg["fusion"]]


def _head_kwargs(splits: Splits) -> dict:
    return {"num_labels": len(splits.labels), "id2label": dict(enumerate(splits.labels)),
            "label2id": {t: i for i, t in enumerate(splits.labels)}}


def build_model(model_dir: str | os.PathLike, variant: str, splits: Splits, budget: Budget, enc: CharEncoder,
                matcher: WordMatcher) -> torch.nn.Module:
    """The token or sequence model of ``variant`` for the task (module docstring), with QV-attention on its last
    ``budget.qv_layers`` char layers when set (sequence tasks only).

    Raises:
        ValueError: a ``plain`` row asked of a PolicyBERT checkpoint, a fusion other than a PolicyBERT
            checkpoint's own, or ``qv_layers`` on a token task.
    """
    if budget.qv_layers and splits.task.kind in ("token", "word"):
        raise ValueError(f"qv_layers={budget.qv_layers}: QV-attention is for the sequence tasks (dc, sa, spm), "
                         f"not {splits.task.name}")
    m = _build_body_model(model_dir, variant, splits, budget, enc, matcher)
    if budget.qv_layers:
        from model.qv_attention import apply_qv

        apply_qv(m, budget.qv_layers, budget.qv_gate_bias, budget.qv_init, budget.qv_gamma_scale)
    return m


def _build_body_model(model_dir, variant: str, splits: Splits, budget: Budget, enc: CharEncoder,
                      matcher: WordMatcher) -> torch.nn.Module:
    from transformers import (AutoModelForSequenceClassification, AutoModelForTokenClassification,
                              BertForSequenceClassification, BertForTokenClassification)

    import model as _registers_policybert  # noqa: F401  (Auto classes know policybert)
    from model.modeling import PolicyBertForSequenceClassification, PolicyBertForTokenClassification

    token = splits.task.kind in ("token", "word")
    head = _head_kwargs(splits)
    mt = model_type(model_dir)
    layers = {"num_hidden_layers": budget.layers} if budget.layers else {}
    if variant == "plain":
        if mt != "bert":
            raise ValueError(f"{model_dir} is a {mt} checkpoint: the plain row needs a BERT checkpoint")
        cls = BertForTokenClassification if token else BertForSequenceClassification
        return cls.from_pretrained(model_dir, **head, **layers)
    if mt == "policybert":
        cls = AutoModelForTokenClassification if token else AutoModelForSequenceClassification
        return cls.from_pretrained(model_dir, fusion=variant, **head)
    from model.backbones import config_from_backbones, init_from_backbones

    cfg = config_from_backbones(str(model_dir), None, fusion=variant, word_vocab_size=matcher.size,
                                max_words=budget.max_words, word_add_above=budget.word_add_above, **layers, **head,
                                fusion_start=budget.frozen_layers,
                                num_word_layers=min(budget.word_layers,
                                                    (budget.layers or 10 ** 6) - budget.frozen_layers))
    m = (PolicyBertForTokenClassification if token else PolicyBertForSequenceClassification)(cfg)
    init_from_backbones(m, str(model_dir))
    init_word_encoder(m, enc, matcher)
    return m


@torch.no_grad()
def predict(model: torch.nn.Module, examples: list[dict], collate_fn: Callable, batch_size: int,
            device: str = "auto", labels: Sequence[str] = (), constrained: bool = True) -> list:
    """Predicted label ids: per example a list over its window's chars (token tasks: the best sequence the tag
    scheme allows, :func:`model.benchmark.decoding.decode_window`, or the per-token argmax with
    ``constrained=False``; a pieces window's token predictions spread over its chars by ``labels``,
    :func:`model.benchmark.inputs.char_predictions`, SPEC §6) or one argmax id (sequence tasks)."""
    from model.benchmark.decoding import allowed_transitions, decode_window
    from model.training import autocast, batches, resolve_device

    masks = allowed_transitions(labels) if constrained and labels else None
    dev = resolve_device(device)
    model.to(dev).eval()
    out: list = []
    for b in batches(len(examples), batch_size, None):
        ex = [examples[i] for i in b]
        batch = {k: v.to(dev) for k, v in collate_fn(ex).items() if k != "labels"}
        with autocast(dev):
            logp = model(**batch).logits.float().log_softmax(-1).cpu()
        if logp.dim() == 3:
            out += [char_predictions(e, decode_window(logp[j, 1:].numpy(), e, masks) if masks
                                     else logp[j, 1:].argmax(-1).tolist(), labels) for j, e in enumerate(ex)]
        else:
            out += logp.argmax(-1).tolist()
    return out


def decode(examples: list[dict], pred: list, df, splits: Splits) -> tuple[list, list]:
    """(gold, predicted) in the metric's form: tags per sentence stitched from windows (POS: per word, read at
    each word's first char), or labels per row."""
    labels, kind = splits.labels, splits.task.kind
    if kind not in ("token", "word"):
        gold = list(df["label"])
        return gold, [labels[p] for p in pred]
    rows = token_rows(df, kind)
    per_row: list[list[int]] = [[0] * len(c) for c, _ in rows]
    for e, p in zip(examples, pred):
        per_row[e["row"]][e["start"]:e["start"] + e["n"]] = p
    gold, out = [], []
    for (chars, tags), p in zip(rows, per_row):
        keep = [i for i, t in enumerate(tags) if t is not None]
        gold.append([tags[i] for i in keep])
        out.append([labels[p[i]] for i in keep])
    return gold, out


def evaluate(model, examples, df, splits: Splits, collate_fn, budget: Budget) -> dict:
    """The task's metrics of ``model`` on one split's encoded examples (``df`` its rows)."""
    pred = predict(model, examples, collate_fn, max(budget.batch_size * 2, 8), budget.device, splits.labels)
    gold, out = decode(examples, pred, df, splits)
    return task_scores(splits.task.kind, splits.task.name, gold, out)


def char_encoder(model_dir: str | os.PathLike):
    """The token stream of a checkpoint (:func:`model.tokens.load_stream`, SPEC §6): one char per position
    from its ``vocab.txt``, or the body's own SentencePiece pieces from its ``tokenizer.json``.

    Raises:
        model.tokens.TokenStreamError: the folder holds no tokenizer a stream can be built from.
    """
    from model.tokens import load_stream

    return load_stream(model_dir)


def finetune_task(splits: Splits, model_dir: str | os.PathLike, variant: str, budget: Budget, seed: int,
                  matcher: WordMatcher, log: Callable[[str], None] = print,
                  save_dir: str | os.PathLike | None = None) -> dict:
    """Fine-tune ``variant`` on the (capped) train split, keep the best-by-dev weights, score test; with
    ``save_dir`` the fine-tuned model (its config incl. ``qv_layers``) is saved there atomically
    (reload: :func:`load_finetuned`).

    Returns:
        ``{"scores": test metrics, "dev": best dev metrics, "seconds", "steps", "best_step", "device",
        "train_rows", "test_rows"}``.
    """
    from model.training import TrainConfig, train

    splits = cap(splits, budget.max_train, budget.max_eval)
    enc = char_encoder(model_dir)
    torch.manual_seed(seed)
    model = build_model(model_dir, variant, splits, budget, enc, matcher)
    words = variant != "plain"
    fn = Collator(words, getattr(model.config, "max_words", 1) if words else 1, enc.pad)
    mw = getattr(model.config, "max_words", budget.max_words)
    data = {s: encode_split(getattr(splits, s), splits, enc, matcher, budget.max_len, mw, seed)
            for s in ("train", "dev", "test")}
    metric = splits.task.metric
    cfg = TrainConfig(epochs=budget.epochs, max_steps=budget.max_steps, batch_size=budget.batch_size,
                      eval_batch_size=budget.batch_size * 2, lr=budget.lr, seed=seed, device=budget.device,
                      log_every=max(1, (budget.max_steps or 100) // 5), save_every=0, eval_every=budget.eval_every,
                      lr_scales=f"classifier={budget.head_lr_scale:g}" if budget.head_lr_scale != 1 else "")
    t0 = time.perf_counter()
    with _bottom(model, budget, [data["train"], data["dev"]], fn, enc.pad):
        run = train(model, data["train"], fn, cfg, log,
                    evaluate=lambda m: evaluate(m, data["dev"], splits.dev, splits, fn, budget), best_metric=metric)
    test = evaluate(model, data["test"], splits.test, splits, fn, budget)
    if save_dir is not None:
        save_finetuned(model, save_dir, model_dir)
    return {"scores": test, "dev": run["best"], "seconds": time.perf_counter() - t0, "steps": run["steps"],
            "best_step": run["best"]["step"] if run["best"] else None, "device": run["device"],
            "train_rows": len(splits.train), "test_rows": len(splits.test), "note": splits.note,
            "budget": asdict(budget)}


def _bottom(model: torch.nn.Module, budget: Budget, splits: list, collate_fn: Callable, pad: int):
    """The budget's frozen, precomputed bottom (:func:`model.benchmark.frozen.cached_bottom`), or no change."""
    from contextlib import nullcontext

    from model.benchmark.frozen import cached_bottom
    from model.training import resolve_device

    if not budget.frozen_layers:
        return nullcontext(model)
    model.to(resolve_device(budget.device))
    return cached_bottom(model, budget.frozen_layers, splits, collate_fn, pad, max(budget.batch_size * 2, 8))


CHAR_FILES = ("vocab.txt", "tokenizer.json", "tokenizer_config.json")


def save_finetuned(model: torch.nn.Module, out_dir: str | os.PathLike,
                   source_dir: str | os.PathLike | None = None) -> None:
    """``model.save_pretrained`` into ``out_dir`` (QV settings are in its config) with the char vocabulary files
    of ``source_dir`` beside it, switched in atomically."""
    import shutil

    from storage.atomic import atomic_path

    with atomic_path(out_dir) as tmp:
        model.cpu().save_pretrained(tmp)
        for name in CHAR_FILES if source_dir else ():
            if (Path(source_dir) / name).is_file():
                shutil.copyfile(Path(source_dir) / name, tmp / name)


def load_finetuned(model_dir: str | os.PathLike, token: bool = False) -> torch.nn.Module:
    """A model saved by :func:`save_finetuned` (BERT or PolicyBERT, token or sequence head), QV layers
    included (:func:`model.qv_attention.load_qv_model`): the same logits as when saved.

    Raises:
        FileNotFoundError: no config.json; ValueError: QV weights missing.
    """
    from transformers import AutoModelForSequenceClassification, AutoModelForTokenClassification

    import model as _registers_policybert  # noqa: F401
    from model.qv_attention import load_qv_model

    cls = AutoModelForTokenClassification if token else AutoModelForSequenceClassification
    model_type(model_dir)  # a clear FileNotFoundError without config.json
    return load_qv_model(cls, model_dir).eval()


def with_device(budget: Budget, device: str | None) -> Budget:
    """The budget on another device (``cpu`` to run gpu-base on a slice without a GPU)."""
    return replace(budget, device=device) if device else budget


__all__ = ["BUDGETS", "Budget", "VARIANTS", "build_model", "char_encoder", "decode", "evaluate", "finetune_task",
           "init_word_encoder", "load_finetuned", "model_type", "predict", "save_finetuned", "variants_for",
           "with_device"]
