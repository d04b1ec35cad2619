"""Loaders of the six public benchmark sets (SPEC §10) with the fallback splits of
``../shared/benchmarks/README.md``.

Every task loads into three DataFrames (train/dev/test) of one shape per task kind:

- ``token`` (cws, ner): ``chars`` (list of characters), ``tags`` (a tag per char: BMES or BIO);
- ``word`` (pos): ``words`` (list of words), ``tags`` (a UPOS tag per word);
- ``seq`` (dc, sa): ``text``, ``label`` (str);
- ``pair`` (spm): ``text_a``, ``text_b``, ``label`` (str).

Fallbacks where a split is missing (README): CWS splits the test file by a seeded hash of the sentence into
80 % train / 20 % test; NER takes a seeded 5 % of train as dev; DC and SPM train on the dev file, with a seeded
10 % of it as dev, and evaluate on test. CWS has no dev either: a seeded 10 % of its 80 % is the dev set. Hash
splits put identical texts on the same side; in addition every train/dev row whose text is also a test text is
dropped (counted in the split note), so nothing is evaluated on what was trained on.
"""
from __future__ import annotations

import gzip
import hashlib
import json
import os
from dataclasses import dataclass, field
from pathlib import Path

import pandas as pd

DEFAULT_ROOT = Path(__file__).resolve().parents[2].parent / "shared" / "benchmarks"
SPLIT_SEED = 13


@dataclass(frozen=True)
class TaskSpec:
    """A benchmark task: ``kind`` (token | word | seq | pair), the ``metric`` its table reports, the thesis's
    figure for it (Table 4, PolicyBERT) and what the data set is."""

    name: str
    kind: str
    metric: str
    thesis: float
    dataset: str


TASKS: dict[str, TaskSpec] = {
    "cws": TaskSpec("cws", "token", "f1", 0.9816, "SIGHAN 2005 MSR"),
    "pos": TaskSpec("pos", "word", "accuracy", 0.9716, "UD Chinese v1.4 (substitute for CTB5)"),
    "ner": TaskSpec("ner", "token", "f1", 0.9437, "MSRA (Bakeoff 2006)"),
    "dc": TaskSpec("dc", "seq", "accuracy", 0.9655, "THUCNews titles (10 classes)"),
    "sa": TaskSpec("sa", "seq", "accuracy", 0.9475, "ChnSentiCorp"),
    "spm": TaskSpec("spm", "pair", "accuracy", 0.9016, "LCQMC"),
}


@dataclass
class Splits:
    """train/dev/test DataFrames of one task, its label (or tag) list, and ``note``: how the split was made
    (the fallback used, rows dropped as overlapping test, caps)."""

    task: TaskSpec
    train: pd.DataFrame
    dev: pd.DataFrame
    test: pd.DataFrame
    labels: list[str]
    note: str
    extra: dict = field(default_factory=dict)

    def sizes(self) -> dict[str, int]:
        """Rows per split."""
        return {"train": len(self.train), "dev": len(self.dev), "test": len(self.test)}


class BenchmarkDataError(ValueError):
    """A benchmark file is missing or a row does not have the task's fields."""


def hash_fraction(key: str, seed: int) -> float:
    """A deterministic number in [0, 1) from ``sha256(seed, key)``: the same text lands on the same side."""
    h = hashlib.sha256(f"{seed}\x00{key}".encode("utf-8")).digest()
    return int.from_bytes(h[:8], "big") / 2.0 ** 64


def row_key(row, kind: str) -> str:
    """The text identity of a row (what "trained on" means): chars/words joined, the text, or both texts."""
    if kind == "token":
        return "".join(row["chars"])
    if kind == "word":
        return "".join(row["words"])
    if kind == "pair":
        return f"{row['text_a']}\t{row['text_b']}"
    return row["text"]


def keys(df: pd.DataFrame, kind: str) -> list[str]:
    """:func:`row_key` of every row."""
    return [row_key(r, kind) for r in df.to_dict("records")]


def _read_jsonl(path: Path) -> list[dict]:
    if not path.is_file():
        raise BenchmarkDataError(f"benchmark file {path} is missing")
    opener = gzip.open if path.suffix == ".gz" else open
    with opener(path, "rt", encoding="utf-8") as fh:
        return [json.loads(line) for line in fh if line.strip()]


def _frame(rows: list[dict], spec: TaskSpec, path: Path) -> pd.DataFrame:
    """Rows of a JSON Lines file -> the task kind's columns; a row without them raises."""
    out = []
    for i, r in enumerate(rows):
        try:
            if spec.kind in ("token", "word"):
                toks, tags = list(r["tokens"]), list(r["tags"])
                if len(toks) != len(tags) or not toks:
                    raise BenchmarkDataError(f"{path}:{i + 1}: {len(toks)} tokens vs {len(tags)} tags")
                out.append({"chars" if spec.kind == "token" else "words": toks, "tags": tags})
            elif spec.kind == "pair":
                out.append({"text_a": str(r["text_a"]), "text_b": str(r["text_b"]), "label": str(r["label"])})
            else:
                out.append({"text": str(r["text"]), "label": str(r["label"])})
        except KeyError as exc:
            raise BenchmarkDataError(f"{path}:{i + 1}: no field {exc} for task {spec.name}") from exc
    return pd.DataFrame(out)


def _by_hash(df: pd.DataFrame, kind: str, share: float, seed: int) -> tuple[pd.DataFrame, pd.DataFrame]:
    """(rows with hash fraction >= share, rows below): the seeded hash split of :func:`hash_fraction`."""
    low = pd.Series([hash_fraction(k, seed) < share for k in keys(df, kind)], index=df.index, dtype=bool)
    return df[~low].reset_index(drop=True), df[low].reset_index(drop=True)


def _find(root: Path, task: str, split: str) -> Path | None:
    for name in (f"{split}.jsonl", f"{split}.jsonl.gz"):
        if (root / task / name).is_file():
            return root / task / name
    return None


def load_task(task: str, root: str | os.PathLike | None = None, seed: int = SPLIT_SEED) -> Splits:
    """Load one task's splits from ``root/<task>/{train,dev,test}.jsonl[.gz]`` (default
    ``../shared/benchmarks``), with the README's fallback where a split is missing (module docstring).

    Raises:
        KeyError: unknown task; BenchmarkDataError: no test file, or a row lacking the task's fields.
    """
    spec = TASKS[task]
    root = Path(root) if root is not None else DEFAULT_ROOT
    files = {s: _find(root, task, s) for s in ("train", "dev", "test")}
    if files["test"] is None:
        raise BenchmarkDataError(f"{root / task}: no test.jsonl")
    frames = {s: _frame(_read_jsonl(p), spec, p) for s, p in files.items() if p is not None}
    notes = []
    if "train" not in frames and "dev" not in frames:  # CWS: the test file only
        rest, test = _by_hash(frames["test"], spec.kind, 0.2, seed)
        train, dev = _by_hash(rest, spec.kind, 0.1, seed + 1)
        frames = {"train": train, "dev": dev, "test": test}
        notes.append("no train split: test file hash-split 80/20 (seed %d), 10 %% of the 80 as dev" % seed)
    elif "train" not in frames:  # DC, SPM: train on dev
        train, dev = _by_hash(frames["dev"], spec.kind, 0.1, seed)
        frames = {"train": train, "dev": dev, "test": frames["test"]}
        notes.append("no train split: trained on the dev file (a seeded 10 % of it as dev), tested on test")
    elif "dev" not in frames:  # NER
        train, dev = _by_hash(frames["train"], spec.kind, 0.05, seed)
        frames = {"train": train, "dev": dev, "test": frames["test"]}
        notes.append("no dev split: a seeded 5 % of train as dev")
    else:
        notes.append("published train/dev/test")
    test_keys = set(keys(frames["test"], spec.kind))
    for s in ("train", "dev"):
        df = frames[s]
        clash = pd.Series([k in test_keys for k in keys(df, spec.kind)], index=df.index, dtype=bool)
        if clash.any():
            frames[s] = df[~clash].reset_index(drop=True)
            notes.append(f"{int(clash.sum())} {s} rows dropped (text also in test)")
    labels = _labels(frames, spec)
    return Splits(spec, frames["train"], frames["dev"], frames["test"], labels, "; ".join(notes))


def _labels(frames: dict[str, pd.DataFrame], spec: TaskSpec) -> list[str]:
    """Sorted tag/label set over all splits (the label inventory, not the data: no leak)."""
    out: set[str] = set()
    for df in frames.values():
        if spec.kind in ("token", "word"):
            out.update(t for tags in df["tags"] for t in tags)
        else:
            out.update(df["label"])
    return sorted(out)


def cap(splits: Splits, max_train: int | None = None, max_test: int | None = None, seed: int = SPLIT_SEED) -> Splits:
    """A copy with train cut to ``max_train`` rows and dev/test to ``max_test`` rows each (seeded samples,
    the same rows for every model and seed), the caps added to the note."""
    def cut(df: pd.DataFrame, n: int | None) -> pd.DataFrame:
        return df.sample(n, random_state=seed).reset_index(drop=True) if n and len(df) > n else df

    note = splits.note
    if max_train and len(splits.train) > max_train:
        note += f"; train capped at {max_train} of {len(splits.train)}"
    if max_test and len(splits.test) > max_test:
        note += f"; dev/test capped at {max_test} (test of {len(splits.test)})"
    return Splits(splits.task, cut(splits.train, max_train), cut(splits.dev, max_test), cut(splits.test, max_test),
                  splits.labels, note, dict(splits.extra))
