"""Command line of the main job, kept free of prefect imports so that bad input fails fast
(one line, nothing written) and Prefect's home can be placed under the data dir before prefect loads."""
from __future__ import annotations

import argparse
import os
import sys
from pathlib import Path

from flows.env import prefect_env, reexec_with_prefect_env

PROFILE_NAMES = ("cpu-small", "gpu-base", "tiny")


def parser() -> argparse.ArgumentParser:
    p = argparse.ArgumentParser(prog="python -m flows.pipeline",
                                description="Run policy_pipeline: documents -> cleaned corpus -> vocab -> "
                                            "PolicySM datasets -> PolicyBERT -> FAISS index.")
    p.add_argument("--input", required=True, help="corpus CSV export (title,pubtime,channel,describes,contentText), or 'crawl'")
    p.add_argument("--data-dir", required=True, help="where every stage writes its outputs")
    p.add_argument("--profile", default="cpu-small", choices=PROFILE_NAMES)
    p.add_argument("--sources-csv", default=None, help="provenance list (default: policy_sources.csv beside input)")
    p.add_argument("--stopwords", default=None, help="stopword list (default: stopwords.txt beside input)")
    p.add_argument("--char-backbone", default=None, help="local BERT checkpoint dir for the char encoder (e.g. bge-base-zh-v1.5)")
    p.add_argument("--word-backbone", default=None, help="local ZEN checkpoint dir for the word encoder")
    p.add_argument("--registry", default=None, help="source registry for --input crawl (default crawler/sources.yaml)")
    p.add_argument("--refresh", action="store_true", help="with --input crawl: re-check fetched pages (conditional GET)")
    p.add_argument("--task-runner", default="threads", choices=("threads", "dask"),
                   help="where mapped stages run: threads (default) or Dask (prefect-dask)")
    p.add_argument("--dask-address", default=None, help="an existing Dask scheduler, e.g. tcp://host:8786")
    p.add_argument("--seeds", type=int, default=3, help="flows.ablation only: training seeds per model (mean ± std)")
    return p


def validate(args: argparse.Namespace) -> None:
    """Raise ValueError / PermissionError with a one-line message for bad input, writing nothing."""
    from crawler.csv_import import read_corpus_csv
    from storage import check_writable_dir

    if args.input == "crawl":
        from crawler.registry import DEFAULT_REGISTRY, load_registry

        load_registry(args.registry or DEFAULT_REGISTRY)  # RegistryError lists every bad entry
    else:
        read_corpus_csv(args.input)  # InputError: missing file, missing columns, empty corpus
    for flag, path in (("--char-backbone", args.char_backbone), ("--word-backbone", args.word_backbone)):
        if path and not any((Path(path) / f).is_file() for f in ("model.safetensors", "pytorch_model.bin")):
            raise ValueError(f"{flag} {path}: not a checkpoint folder (no model.safetensors or pytorch_model.bin)")
    if args.word_backbone and not args.char_backbone:
        raise ValueError("--word-backbone needs --char-backbone (the word encoder is fused into a BERT char encoder)")
    check_writable_dir(args.data_dir)


def preflight(module: str, argv: list[str] | None = None, reexec: bool = True) -> argparse.Namespace:
    """Parse and validate; on bad input print ``error: …`` and exit 2. Then, unless a Prefect
    server is configured (``PREFECT_API_URL``), re-exec with Prefect's home under the data dir."""
    args = parser().parse_args(argv)
    try:
        validate(args)
    except (ValueError, OSError) as exc:
        print(f"error: {exc}", file=sys.stderr)
        sys.exit(2)
    if reexec and not os.environ.get("PREFECT_API_URL"):
        os.makedirs(prefect_env(args.data_dir)["PREFECT_HOME"], exist_ok=True)
        reexec_with_prefect_env(args.data_dir, module)
    return args
