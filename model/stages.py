"""Model stages as storage-to-storage steps (SPEC §6): pretraining data, pretraining, fine-tuning.

Checkpoints are HF ``save_pretrained`` folders that also hold the char tokenizer (``vocab.txt``)
and the word vocabulary (``word_vocab.txt``) plus ``metrics.json``, so a checkpoint alone reloads
the model and its inputs exactly. Never imports prefect.
"""
from __future__ import annotations

import json
import logging
import os
import shutil
from dataclasses import asdict, dataclass
from pathlib import Path
from typing import Callable

import numpy as np
import pandas as pd
import torch
from transformers import AutoModelForSequenceClassification, BertConfig, BertForPreTraining

from corpus.pairs import PairConfig, split_documents
from model.baselines import pair_baselines
from model.backbone_stage import BackboneConfig, has_checkpoint
from model.backbones import config_from_backbones, init_from_backbones, init_word_encoder
from model.configuration import PolicyBertConfig
from model.features import CharEncoder, WordMatcher, build_char_vocab, collate, encode_tokens, save_char_tokenizer
from model.tokens import PieceStream, as_tokens, load_stream, stream_kind
from model.modeling import PolicyBertForPreTraining
from model.pretrain_data import READ_BATCH_ROWS, PretrainDataConfig, ShardedExamples, write_pretrain_epochs
from model.training import (TrainConfig, evaluate_classifier, evaluate_pretraining, on_main_process, point_metrics,
                            train)
from storage.contracts import Stage, checkpoint, folder
from storage import atomic_path, manifest_fingerprint, read_manifest, read_table
from storage.tables import iter_table

E5, BACKBONE_DIR = "models/e5", "models/backbone"  # the backbone stage's outputs (SPEC §8)

WORD_VOCAB = "word_vocab.txt"
log = logging.getLogger(__name__)


def _copy_inputs_files(tokenizer_dir: Path, vocab_dir: Path, dest: Path) -> None:
    for f in tokenizer_dir.iterdir():
        if f.is_file():
            shutil.copy2(f, dest / f.name)
    shutil.copy2(vocab_dir / "vocab.txt", dest / WORD_VOCAB)


def load_inputs(ckpt_dir: str | os.PathLike) -> tuple[CharEncoder, WordMatcher]:
    """Token stream (:func:`model.tokens.load_stream`: chars, or the body's pieces) and word matcher saved
    beside a checkpoint."""
    ckpt_dir = Path(ckpt_dir)
    return load_stream(ckpt_dir), WordMatcher.from_file(ckpt_dir / WORD_VOCAB)


def tokenizer_stage(sentences_dir, out_dir, char_backbone: str | None = None, min_freq: int = 1) -> dict:
    """Char tokenizer: the backbone's ``vocab.txt`` when given, else chars of the corpus sentences; a backbone
    whose folder holds only a SentencePiece ``tokenizer.json`` (the converted e5) gives its own pieces instead
    (SPEC §6, "Tokens of a SentencePiece body"; :class:`model.tokens.PieceStream`)."""
    if char_backbone and stream_kind(char_backbone) == "pieces":
        stream = PieceStream.from_dir(char_backbone)
        with atomic_path(out_dir) as tmp:
            stream.save(tmp)
            (tmp / "inputs.json").write_text(json.dumps({"sentences": manifest_fingerprint(sentences_dir),
                                                         "char_backbone": char_backbone}))
        return {"char_vocab_size": stream.size, "token_stream": "pieces"}
    with atomic_path(out_dir) as tmp:
        if char_backbone:
            vocab = Path(char_backbone, "vocab.txt").read_text(encoding="utf-8").splitlines()
        else:
            vocab = build_char_vocab((t for df in iter_table(sentences_dir, ["text"], batch_rows=READ_BATCH_ROWS)
                                      for t in df["text"]), min_freq)
        save_char_tokenizer(vocab, tmp)
        (tmp / "inputs.json").write_text(json.dumps({"sentences": manifest_fingerprint(sentences_dir),
                                                     "char_backbone": char_backbone}))
    return {"char_vocab_size": len(vocab)}


def pretrain_data_stage(sentences_dir, segments_dir, vocab_dir, tokenizer_dir, split_of: dict[str, str],
                        out_root, cfg: PretrainDataConfig, epochs: int) -> dict:
    """``pretrain/epoch=N/`` tables (split=train/dev/test) for N in 0..epochs-1, written as one folder
    (atomically: a reader sees the previous epochs or the new ones, never a mix), streaming shard by shard
    and document group by group (:func:`model.pretrain_data.write_pretrain_epochs`: memory bounded by the
    shard and group sizes, time linear in the sentences). Returns ``{"epoch=N": stats}``.

    Raises:
        ValueError: a sentence's document has no split; storage.TableError: a missing input table.
    """
    enc = load_stream(tokenizer_dir)
    matcher = WordMatcher.from_file(Path(vocab_dir) / "vocab.txt")
    inputs = {"sentences": manifest_fingerprint(sentences_dir), "segments": manifest_fingerprint(segments_dir),
              "vocab": manifest_fingerprint(vocab_dir)}
    with atomic_path(out_root) as tmp:
        tmp.mkdir(parents=True)
        return write_pretrain_epochs(sentences_dir, segments_dir, split_of, enc, matcher, cfg, epochs, tmp,
                                     config=asdict(cfg), code_version=PRETRAIN_DATA.code_version(), inputs=inputs)


def pretrain_inputs_stage(sentences_dir, segments_dir, vocab_dir, clean_dir, tokenizer_dir, out_root,
                          pairs_cfg: PairConfig, cfg: PretrainDataConfig, epochs: int,
                          char_backbone: str | None = None, backbone: str | None = None) -> dict:
    """The char tokenizer (:func:`tokenizer_stage`) and the pretraining epochs (:func:`pretrain_data_stage`),
    split by document exactly as the PolicySM datasets are (``pairs_cfg``'s seed and ratios). The char vocab
    is ``char_backbone``'s (a user's BERT), else the backbone stage's char checkpoint ``backbone`` when it holds
    one (:func:`resolve_char_backbone`), else the corpus's chars."""
    tok = tokenizer_stage(sentences_dir, tokenizer_dir, resolve_char_backbone(char_backbone, backbone))
    ids = read_table(clean_dir, ["doc_id"])["doc_id"].tolist()
    split_of = split_documents(ids, pairs_cfg.split_ratios, pairs_cfg.seed)
    return {**tok, **pretrain_data_stage(sentences_dir, segments_dir, vocab_dir, tokenizer_dir, split_of, out_root,
                                         cfg, epochs)}


def resolve_char_backbone(char_backbone: str | None, backbone: str | None) -> str | None:
    """The char encoder to start from: a user's ``--char-backbone`` dir first, else the backbone stage's
    ``models/backbone`` when it holds a checkpoint (SPEC §8), else None (from scratch)."""
    if char_backbone:
        return str(char_backbone)
    return str(backbone) if has_checkpoint(backbone) else None


PLAIN_BERT = "plain"  # model_kwargs["fusion"] for the ablation's baseline: transformers' BertForPreTraining, no words


@dataclass(frozen=True)
class BatchCollator:
    """:func:`collate` with a model's word settings; a plain class (not a closure) so DataLoader worker
    processes started with ``spawn`` can unpickle it. ``words``: PolicyBERT inputs (word ids and the matching
    matrix, ``max_words`` per example); else the char inputs only (plain BERT)."""

    words: bool
    max_words: int
    pad_id: int

    def __call__(self, examples: list[dict]) -> dict:
        batch = collate(examples, self.max_words, self.pad_id)
        if not self.words:
            del batch["word_ids"], batch["matching_matrix"]
        return batch


def batch_collator(config, pad_id: int) -> Callable[[list[dict]], dict]:
    """:class:`BatchCollator` for a model's config: a PolicyBERT config gets word ids and the matching matrix
    (``max_words`` of the config); a plain BERT config gets the char inputs only."""
    words = config.model_type == "policybert"
    return BatchCollator(words, config.max_words if words else 1, pad_id)


def heldout_examples(epoch_dir, max_examples: int, seed: int) -> list[dict]:
    """Up to ``max_examples`` example dicts drawn at random (seeded) from the dev and test rows of a
    pretraining epoch table, read shard by shard (only the shards holding drawn rows are loaded)."""
    view = ShardedExamples(epoch_dir, splits=("dev", "test"), cache_shards=1)
    n = len(view)
    pick = np.random.default_rng(seed).choice(n, max_examples, replace=False) if n > max_examples else np.arange(n)
    return view.rows(pick)


def _state_dir(out_dir) -> Path:
    out = Path(out_dir)
    return out.parent / f".{out.name}.train-state"


def pretrain_stage(pretrain_root, tokenizer_dir, vocab_dir, out_dir, model_kwargs: dict, cfg: TrainConfig,
                   epochs: int, max_eval_examples: int = 2000, char_backbone: str | None = None,
                   word_backbone: str | None = None, log_fn: Callable[[str], None] = print,
                   on_step: Callable[[int, int], None] | None = None, backbone: str | None = None,
                   adapt: bool = True) -> dict:
    """Pretrain PolicyBERT (MLM + NSP) on ``pretrain/epoch=*/split=train`` (epoch e uses the data
    of epoch ``e % epochs``), from scratch or initialised from local backbones (char: a BERT dir such
    as bge-base-zh-v1.5; word: a ZEN dir), with resumable training state beside ``out_dir``. An epoch is
    read through :class:`model.pretrain_data.ShardedExamples` (a few shards in memory, shuffled within shard
    windows per (seed, epoch)), never materialised; the held-out set is ``max_eval_examples`` rows drawn from
    dev + test (:func:`heldout_examples`).

    Evaluates MLM loss/accuracy, perplexity and NSP accuracy on held-out documents (dev + test)
    and saves the checkpoint with ``metrics.json`` (incl. the backbone init report) atomically.

    On a char backbone without a word backbone the word encoder starts from the body
    (:func:`model.backbones.init_word_encoder`: word layer i = char layer i, a word's row = the mean of its
    tokens' rows) behind identity-initialised fusion (SPEC §6, "On a pretrained body"). ``adapt=False`` runs no
    MLM + NSP step: the checkpoint is that initialised model (``cpu-small``: on 2 cores the job's budget goes to
    fine-tuning the 12-layer body; its MLM head over e5's 250k pieces would start untrained), and no held-out
    MLM is measured.
    """
    plain = model_kwargs.get("fusion") == PLAIN_BERT
    if plain and word_backbone:
        raise ValueError("the plain BERT baseline has no word encoder: it takes no --word-backbone")
    char_backbone = resolve_char_backbone(char_backbone, backbone)
    enc = load_stream(tokenizer_dir)
    word_list = [w for w in (Path(vocab_dir) / "vocab.txt").read_text(encoding="utf-8").splitlines() if w]
    matcher = WordMatcher(word_list)
    torch.manual_seed(cfg.seed)
    config = _pretraining_config(model_kwargs, enc.size, matcher.size, char_backbone, word_backbone)
    model = BertForPreTraining(config) if config.model_type == "bert" else PolicyBertForPreTraining(config)
    init_report = init_from_backbones(model, char_backbone, word_backbone, word_list) if (
        char_backbone or word_backbone) else None
    if char_backbone and not word_backbone and not plain:
        init_report["word"] += init_word_encoder(model, enc, matcher)
        init_report["new"] = [k for k in init_report["new"]
                              if not k.startswith(("bert.encoder.word_layers.", "bert.word_embeddings."))]
    fn = batch_collator(config, enc.pad)
    if not adapt:
        run = {"steps": 0, "epochs_run": 0, "final_loss": None, "seconds": 0.0, "tokens_per_s": 0.0, "curve": [],
               "best": None, "adapted": False}
        return on_main_process(lambda: _finish_pretraining(
            model, run, [], fn, cfg, config, init_report, epochs, pretrain_root, tokenizer_dir, vocab_dir, out_dir,
            char_backbone, word_backbone), {"train": run, "heldout": None, "init_report": None})

    def epoch_data(e: int) -> ShardedExamples:  # streamed: a few shards in memory at a time
        return ShardedExamples(Path(pretrain_root) / f"epoch={e % epochs}", splits=("train",))

    held = heldout_examples(Path(pretrain_root) / "epoch=0", max_eval_examples, cfg.seed)
    curve_set = held[:max(1, min(len(held), max_eval_examples // 4))]  # the learning curve's eval points
    run = train(model, epoch_data, fn, TrainConfig(**{**asdict(cfg), "epochs": cfg.epochs * epochs}), log_fn,
                state_dir=_state_dir(out_dir), on_step=on_step,
                evaluate=(lambda m: evaluate_pretraining(m, curve_set, fn, cfg)) if held else None)
    return on_main_process(lambda: _finish_pretraining(
        model, run, held, fn, cfg, config, init_report, epochs, pretrain_root, tokenizer_dir, vocab_dir, out_dir,
        char_backbone, word_backbone), {"train": run, "heldout": None, "init_report": None})


def _pretraining_config(model_kwargs: dict, char_vocab: int, word_vocab: int, char_backbone, word_backbone):
    """The config to pretrain: the plain BERT baseline's or PolicyBERT's, from a char backbone's config when
    there is one (the plain row starts from the same body as the fused ones).

    Raises:
        ValueError: the char backbone's vocabulary is smaller than the tokenizer's.
    """
    plain = model_kwargs.get("fusion") == PLAIN_BERT
    if char_backbone and plain:
        return BertConfig.from_pretrained(str(char_backbone))
    if char_backbone:
        config = config_from_backbones(char_backbone, word_backbone, word_vocab_size=word_vocab,
                                       **{k: v for k, v in model_kwargs.items()
                                          if k in ("fusion", "max_words", "num_word_layers", "word_add_above") and not
                                          (k == "num_word_layers" and word_backbone)})
        if config.vocab_size < char_vocab:
            raise ValueError(f"char backbone vocab {config.vocab_size} < tokenizer vocab {char_vocab}")
        return config
    if plain:
        return BertConfig(vocab_size=char_vocab, type_vocab_size=2, **{k: v for k, v in model_kwargs.items()
                                                                        if k not in ("fusion", "num_word_layers", "max_words",
                                                                                     "word_add_above")})
    return PolicyBertConfig(vocab_size=char_vocab, word_vocab_size=word_vocab, **model_kwargs)


def _finish_pretraining(model, run, held, fn, cfg, config, init_report, epochs, pretrain_root, tokenizer_dir,
                        vocab_dir, out_dir, char_backbone, word_backbone) -> dict:
    """Held-out evaluation and the atomic checkpoint write of :func:`pretrain_stage` (main process)."""
    metrics = {"train": run, "heldout": evaluate_pretraining(model, held, fn, cfg) if held else None,
               "config": {k: getattr(config, k, None) for k in ("model_type", "fusion", "hidden_size", "num_hidden_layers",
                                                           "num_word_layers", "vocab_size", "word_vocab_size")},
               "train_config": asdict(cfg), "backbones": {"char": char_backbone, "word": word_backbone},
               "init_report": None if init_report is None else {
                   "from_char_backbone": len(init_report["char"]), "from_word_backbone": len(init_report["word"]),
                   "new": init_report["new"], "skipped": init_report["skipped"],
                   "word_rows_from_zen": init_report["word_rows_from_zen"]},
               "inputs": {"pretrain": [manifest_fingerprint(Path(pretrain_root) / f"epoch={e}") for e in range(epochs)]}}
    with atomic_path(out_dir) as tmp:
        model.save_pretrained(tmp)
        _copy_inputs_files(Path(tokenizer_dir), Path(vocab_dir), tmp)
        (tmp / "metrics.json").write_text(json.dumps(metrics, indent=1, default=str))
    shutil.rmtree(_state_dir(out_dir), ignore_errors=True)
    return metrics


def encode_pairs(pairs: pd.DataFrame, enc: CharEncoder, matcher: WordMatcher, max_len: int, max_words: int,
                 seed: int) -> list[dict]:
    """Pairs (text_a, text_b, label) -> example dicts for :func:`collate`, in the stream's tokens
    (:func:`model.features.encode_tokens`; one char per token: what :func:`model.features.encode` gives)."""
    rng = np.random.default_rng(seed)
    out = []
    for a, b, label in zip(pairs["text_a"], pairs["text_b"], pairs["label"]):
        e = encode_tokens(as_tokens(enc, a), as_tokens(enc, b), enc, matcher, max_len, max_words, rng)
        out.append({"input_ids": e.input_ids, "token_type_ids": e.token_type_ids, "word_ids": e.word_ids,
                    "word_spans": e.word_spans, "label": int(label)})
    return out


def split_rows(dataset_dir, split: str) -> int:
    """Rows of partition ``split=<split>`` of a table, from its manifest (no shard read)."""
    return sum(s["rows"] for s in read_manifest(dataset_dir)["shards"] if s.get("partition", {}).get("split") == split)


def read_split(dataset_dir, split: str, k: int | None, seed: int) -> pd.DataFrame:
    """The rows of ``split``; with ``k`` below its size, the ``k`` rows ``DataFrame.sample(k, random_state=seed)``
    draws (same rows, same order, same index labels), read shard by shard keeping only the drawn rows, so memory
    holds one shard and the sample, never the whole split."""
    n = split_rows(dataset_dir, split)
    if k is None or n <= k:
        return read_table(dataset_dir, partition={"split": split})
    pick = np.random.RandomState(seed).choice(n, k, replace=False)  # what DataFrame.sample draws (pandas com.random_state)
    wanted, parts, offset = np.sort(pick), [], 0
    for df in iter_table(dataset_dir, partition={"split": split}):
        rows = wanted[(wanted >= offset) & (wanted < offset + len(df))]
        parts.append(df.iloc[rows - offset].set_axis(rows))
        offset += len(df)
    return pd.concat(parts).loc[pick]


def finetune_stage(pretrained_dir, dataset_dir, out_dir, cfg: TrainConfig, max_len: int = 128,
                   max_eval_examples: int | None = None, log_fn: Callable[[str], None] = print,
                   on_step: Callable[[int, int], None] | None = None) -> dict:
    """Fine-tune ``[CLS] -> Dropout -> Linear(2)`` on a PolicySM dataset as one training run; the
    checkpoint with the best dev accuracy (evaluated at each epoch end, or every ``cfg.eval_every``
    steps, and at the last step) is kept, reported (``best_step``, the dev curve in
    ``train.curve``) and tested; saved to ``out_dir`` atomically (main process only). The splits are read
    shard by shard (:func:`read_split`): train capped at the rows ``cfg.max_steps`` can use, dev and test at
    ``max_eval_examples`` (seeded samples).
    """
    enc, matcher = load_inputs(pretrained_dir)
    model = AutoModelForSequenceClassification.from_pretrained(pretrained_dir, num_labels=2)  # PolicyBERT or plain BERT
    mw = getattr(model.config, "max_words", 1)
    fn = batch_collator(model.config, enc.pad)
    cap = cfg.max_steps * cfg.batch_size * cfg.grad_accum if cfg.max_steps else None
    split = {"train": read_split(dataset_dir, "train", cap, cfg.seed),
             **{s: read_split(dataset_dir, s, max_eval_examples or None, cfg.seed) for s in ("dev", "test")}}
    data = {s: encode_pairs(df, enc, matcher, max_len, mw, cfg.seed) for s, df in split.items()}
    # the baselines first: fitted on the same train rows as the model (a one-label split raises before training)
    baselines = pair_baselines(split)
    run = train(model, data["train"], fn, cfg, log_fn, state_dir=_state_dir(out_dir), on_step=on_step,
                evaluate=lambda m: evaluate_classifier(m, data["dev"], fn, cfg), best_metric="accuracy")
    return on_main_process(lambda: _finish_finetuning(model, run, data, split, baselines, fn, cfg, pretrained_dir,
                                                      dataset_dir, out_dir),
                           {"train": run, **dict.fromkeys(("best_step", "dev", "test", "majority_test", "baselines"))})


def _finish_finetuning(model, run, data, split, baselines, fn, cfg, pretrained_dir, dataset_dir, out_dir) -> dict:
    """Dev/test evaluation of the kept checkpoint and its atomic write for :func:`finetune_stage` (main process).
    The dev figures of a best-by-dev run are those of its kept point (the same weights on the same examples:
    evaluating again would repeat 9 s or more on 2 cores)."""
    best = run["best"]  # the kept weights' dev evaluation, made in training on the same examples
    metrics = {"train": run, "best_step": best["step"] if best else None,
               "dev": point_metrics(best) if best else evaluate_classifier(model, data["dev"], fn, cfg),
               "test": evaluate_classifier(model, data["test"], fn, cfg),
               "majority_test": float(max(split["test"]["label"].mean(), 1 - split["test"]["label"].mean()))
               if len(split["test"]) else None,
               "baselines": baselines,
               "dataset": read_manifest(dataset_dir)["name"], "train_config": asdict(cfg),
               "inputs": {"dataset": manifest_fingerprint(dataset_dir),
                          "pretrained": json.loads(Path(pretrained_dir, "metrics.json").read_text()).get("inputs")}}
    with atomic_path(out_dir) as tmp:
        model.save_pretrained(tmp)
        for f in Path(pretrained_dir).iterdir():
            if f.suffix == ".txt" or f.name.startswith(("tokenizer", "special_tokens")):
                shutil.copy2(f, tmp / f.name)
        (tmp / "metrics.json").write_text(json.dumps(metrics, indent=1, default=str))
    shutil.rmtree(_state_dir(out_dir), ignore_errors=True)
    return metrics


# Stage contracts (see storage.contracts). ``{out}``, ``{pretrained}`` and ``{dataset}`` are task parameters
# (the ablation trains several models side by side).
BACKBONE = Stage("backbone", "model.backbone_stage:backbone_stage", writes=(folder(E5), folder(BACKBONE_DIR)),
                 config=BackboneConfig, settings={"cfg": "backbone"}, files=("e5_file",), scratch=("cache/e5",),
                 args={"e5_out": E5, "backbone_out": BACKBONE_DIR, "cache_dir": "cache/e5"})
PRETRAIN_DATA = Stage("pretrain-data", "model.stages:pretrain_inputs_stage",
                      reads=("sentences", "segments", "vocab", "documents_clean", BACKBONE_DIR),
                      writes=(folder("tokenizer"), folder("pretrain")), config=PretrainDataConfig,
                      settings={"pairs_cfg": "pairs", "cfg": "pretrain_data", "epochs": "pretrain_epochs"},
                      files=("char_backbone",),
                      args={"sentences_dir": "sentences", "segments_dir": "segments", "vocab_dir": "vocab",
                            "clean_dir": "documents_clean", "backbone": BACKBONE_DIR, "tokenizer_dir": "tokenizer",
                            "out_root": "pretrain"})
PRETRAIN = Stage("pretrain", "model.stages:pretrain_stage", reads=("pretrain", "tokenizer", "vocab", BACKBONE_DIR),
                 writes=(checkpoint("{out}"),), config=TrainConfig,
                 settings={"model_kwargs": "model", "cfg": "pretrain", "epochs": "pretrain_epochs",
                           "adapt": "domain_adapt"},
                 files=("char_backbone", "word_backbone"), defaults={"out": "models/pretrain"},
                 args={"pretrain_root": "pretrain", "tokenizer_dir": "tokenizer", "vocab_dir": "vocab",
                       "backbone": BACKBONE_DIR, "out_dir": "{out}"},
                 keep=("heldout", "train", "init_report"), gpu=True)
FINETUNE = Stage("finetune", "model.stages:finetune_stage", reads=("{pretrained}", "{dataset}"),
                 writes=(checkpoint("{out}"),), config=TrainConfig,
                 settings={"cfg": "finetune", "max_eval_examples": "finetune_max_eval", "max_len": "finetune_max_len"},
                 defaults={"pretrained": "models/pretrain", "dataset": "policysm1", "out": "models/finetune-policysm1"},
                 args={"pretrained_dir": "{pretrained}", "dataset_dir": "{dataset}", "out_dir": "{out}"},
                 keep=("dev", "test", "majority_test", "baselines", "best_step", "train"), gpu=True)
STAGES = (BACKBONE, PRETRAIN_DATA, PRETRAIN, FINETUNE)
