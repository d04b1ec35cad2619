"""Command line of the main job, kept free of prefect imports so that bad input fails fast
(one line, nothing written) and Prefect's home can be placed under the data dir before prefect loads."""
from __future__ import annotations

import argparse
import os
import sys
from collections.abc import Iterator
from contextlib import ExitStack, contextmanager
from pathlib import Path

from flows.env import prefect_env, reexec_with_prefect_env

PROFILE_NAMES = ("cpu-small", "cpu-scratch", "gpu-base", "tiny")  # flows.profiles.PROFILES (not imported: fast --help)
COLUMN_FLAGS = (("id", "id"), ("text", "text"), ("title", "title"), ("source", None), ("pubtime", None), ("url", None))
# policy metadata columns (crawler.csv_import.METADATA_MAPPING): also for a CSV export's extra columns
METADATA_FLAGS = ("region", "level", "issuer", "doc_number", "published", "effective", "validity")


def column_mapping(args: argparse.Namespace) -> dict | None:
    """The ``--*-column`` flags as ``ColumnMapping`` fields (only those given), or None when none is."""
    given = {f"{name}_column": getattr(args, f"{name}_column") for name in
             (*(n for n, _ in COLUMN_FLAGS), *METADATA_FLAGS)}
    given = {k: v for k, v in given.items() if v is not None}
    return given or None


def parser() -> argparse.ArgumentParser:
    p = argparse.ArgumentParser(prog="python -m flows.pipeline",
                                description="Run policy_pipeline: documents -> cleaned corpus -> vocab -> "
                                            "PolicySM datasets -> PolicyBERT -> FAISS index.")
    p.add_argument("--input", required=True,
                   help="corpus CSV export (title,pubtime,channel,describes,contentText), a JSON Lines (.jsonl, "
                        ".jsonl.gz) or Parquet file read with the --*-column mapping, or 'crawl'")
    for name, default in COLUMN_FLAGS:
        p.add_argument(f"--{name}-column", default=None,
                       help=f"JSON Lines / Parquet input: the field holding the {name}" +
                            (f" (default {default!r})" if default else " (default: none)"))
    for name in METADATA_FLAGS:
        p.add_argument(f"--{name.replace('_', '-')}-column", default=None, dest=f"{name}_column",
                       help=f"any input: the column holding the document's {name.replace('_', ' ')} "
                            "(policy records; kept on documents)")
    p.add_argument("--data-dir", required=True, help="where every stage writes its outputs")
    p.add_argument("--profile", default="cpu-small", choices=PROFILE_NAMES)
    p.add_argument("--sources-csv", default=None, help="provenance list (default: policy_sources.csv beside input)")
    p.add_argument("--stopwords", default=None, help="stopword list (default: stopwords.txt beside input)")
    p.add_argument("--char-backbone", default=None, help="local BERT checkpoint dir for the char encoder (e.g. bge-base-zh-v1.5)")
    p.add_argument("--word-backbone", default=None, help="local ZEN checkpoint dir for the word encoder")
    p.add_argument("--registry", default=None, help="source registry for --input crawl (default crawler/sources.yaml)")
    p.add_argument("--refresh", action="store_true", help="with --input crawl: re-check fetched pages (conditional GET)")
    p.add_argument("--task-runner", default="threads", choices=("threads", "dask"),
                   help="where mapped stages run: threads (default) or Dask (prefect-dask): a local cluster of "
                        "--dask-workers processes, or the scheduler at --dask-address")
    p.add_argument("--dask-address", default=None,
                   help="with --task-runner dask: an existing Dask scheduler, e.g. tcp://host:8786 (its workers need "
                        "this package, the data dir path and PREFECT_API_URL: a Prefect server they can reach)")
    p.add_argument("--dask-workers", type=int, default=None,
                   help="with --task-runner dask and no --dask-address: worker processes of the local cluster "
                        "(one thread each; default 2)")
    p.add_argument("--set", action="append", default=[], metavar="KEY=VALUE", dest="settings",
                   help="override one profile setting, e.g. --set chunks.max_chars=500 (repeatable)")
    p.add_argument("--seeds", type=int, default=3, help="flows.ablation only: training seeds per model (mean ± std)")
    p.add_argument("--lock-timeout", type=float, default=None, metavar="SECONDS",
                   help="when another run holds the data dir: wait at most this long, then exit 2 "
                        "(0 = fail at once; default: wait until it ends)")
    return p


def check_dask_options(args: argparse.Namespace) -> None:
    """The Dask flags: ``--dask-address`` / ``--dask-workers`` only with ``--task-runner dask``; at least one
    worker; an existing cluster only with ``PREFECT_API_URL`` set (its workers cannot reach the run's
    temporary server on 127.0.0.1, and would start servers of their own: see :mod:`flows.runners`).

    Raises:
        ValueError: a one-line message naming the flag.
    """
    if args.task_runner != "dask":
        if args.dask_address:
            raise ValueError("--dask-address applies to --task-runner dask only")
        if args.dask_workers is not None:
            raise ValueError("--dask-workers applies to --task-runner dask only")
        return
    if args.dask_workers is not None and args.dask_workers < 1:
        raise ValueError(f"--dask-workers {args.dask_workers}: need at least 1 worker process")
    if args.dask_address and not os.environ.get("PREFECT_API_URL"):
        raise ValueError(f"--dask-address {args.dask_address}: set PREFECT_API_URL to a Prefect server the Dask "
                         "workers can reach (e.g. `prefect server start --host 0.0.0.0`)")


def check_settings(cfg) -> None:
    """Bounds of the run's top-level settings and model size (each stage config checks its own fields when
    made: ``storage.bounds``), and the cross-stage ones: the pretraining sequence fits the model's positions.

    Raises:
        ValueError: naming the setting and its allowed range.
    """
    from model.configuration import FUSIONS
    from model.training import PRECISIONS
    from storage.bounds import check_bounds, check_choice

    check_bounds(cfg, nullable=("finetune_max_eval",), segment_parts=(1, 1024), pretrain_epochs=(1, 1000),
                 finetune_max_eval=(1, None), embed_batch_size=(1, 1 << 16), embed_parts=(1, 1024))
    m = cfg.model
    check_bounds(m, hidden_size=(8, 16384), num_hidden_layers=(1, 128), num_attention_heads=(1, 256),
                 intermediate_size=(1, 1 << 17), max_position_embeddings=(8, 1 << 16), num_word_layers=(0, 128),
                 max_words=(0, 8192))
    check_choice(m, "fusion", FUSIONS)
    check_choice(cfg, "embed_precision", PRECISIONS)
    if m.hidden_size % m.num_attention_heads:
        raise ValueError(f"model.hidden_size = {m.hidden_size}: must be a multiple of model.num_attention_heads "
                         f"= {m.num_attention_heads}")
    if m.num_word_layers > m.num_hidden_layers:
        raise ValueError(f"model.num_word_layers = {m.num_word_layers}: must be <= model.num_hidden_layers "
                         f"= {m.num_hidden_layers}")
    if cfg.pretrain_data.max_len > m.max_position_embeddings:
        raise ValueError(f"pretrain_data.max_len = {cfg.pretrain_data.max_len}: must be <= "
                         f"model.max_position_embeddings = {m.max_position_embeddings}")


def validate(args: argparse.Namespace) -> None:
    """Raise ValueError / PermissionError with a one-line message for bad input, writing nothing."""
    from crawler.csv_import import read_corpus_csv
    from storage import check_writable_dir

    if args.input == "crawl":
        from crawler.registry import DEFAULT_REGISTRY, load_registry

        load_registry(args.registry or DEFAULT_REGISTRY)  # RegistryError lists every bad entry
    else:
        from crawler.records_import import ColumnMapping, is_record_file, read_records

        if is_record_file(args.input):
            read_records(args.input, ColumnMapping(**(column_mapping(args) or {})))  # InputError: no document
        else:
            mapping = column_mapping(args) or {}
            plain = sorted(k for k in mapping if k[:-7] not in METADATA_FLAGS)
            if plain:
                raise ValueError(f"--{plain[0][:-7]}-column applies to JSON Lines / Parquet input only (a CSV "
                                 "export takes only the policy metadata flags --region-column … --validity-column)")
            read_corpus_csv(args.input, metadata=mapping)  # InputError: missing file or column, empty corpus
    for flag, path in (("--char-backbone", args.char_backbone), ("--word-backbone", args.word_backbone)):
        if path and not any((Path(path) / f).is_file() for f in ("model.safetensors", "pytorch_model.bin")):
            raise ValueError(f"{flag} {path}: not a checkpoint folder (no model.safetensors or pytorch_model.bin)")
    if args.word_backbone and not args.char_backbone:
        raise ValueError("--word-backbone needs --char-backbone (the word encoder is fused into a BERT char encoder)")
    check_dask_options(args)
    if args.lock_timeout is not None and not args.lock_timeout >= 0:
        raise ValueError(f"--lock-timeout {args.lock_timeout}: must be >= 0 seconds")
    from flows.profiles import get_profile, with_settings

    check_settings(with_settings(get_profile(args.profile), args.settings))  # ValueError names a bad --set
    check_writable_dir(args.data_dir)


def preflight(module: str, argv: list[str] | None = None, reexec: bool = True) -> argparse.Namespace:
    """Parse; unless a Prefect server is configured (``PREFECT_API_URL``), re-exec with Prefect's home under the
    data dir (:mod:`flows.env`) first, so that the validation (which imports the model code, ~5 s) runs once; then
    validate: on bad input print ``error: …`` and exit 2."""
    args = parser().parse_args(argv)
    if reexec and not os.environ.get("PREFECT_API_URL") and _creatable(args.data_dir):
        reexec_with_prefect_env(args.data_dir, module)
    try:
        validate(args)
    except (ValueError, OSError) as exc:
        print(f"error: {exc}", file=sys.stderr)
        sys.exit(2)
    return args


def _creatable(data_dir: str) -> bool:
    """Whether Prefect's home can be made under ``data_dir`` (else validation names the problem)."""
    try:
        os.makedirs(prefect_env(data_dir)["PREFECT_HOME"], exist_ok=True)
    except OSError:
        return False
    return True


def _say(message: str) -> None:
    print(message, file=sys.stderr, flush=True)


@contextmanager
def exclusive_run(args: argparse.Namespace) -> Iterator[None]:
    """Hold the data dir for the ``with`` block: its run lock (``DATA_DIR/.run.lock``, waiting at most
    ``args.lock_timeout`` seconds, printing once who holds it), SIGTERM/SIGINT handlers that take
    the run's temporary Prefect server down with it, and, once locked, stop servers orphaned by
    killed runs on the data dir. A busy data dir prints ``error: data dir … is in use by another
    run (pid N, …)`` and exits 2 (``SystemExit``)."""
    from ops.prefect_server import stop_on_signals, stop_orphaned_servers
    from ops.runlock import RunLockBusy, run_lock

    with ExitStack() as stack:
        stack.enter_context(stop_on_signals())
        try:
            stack.enter_context(run_lock(args.data_dir, timeout=args.lock_timeout, on_wait=_say))
        except RunLockBusy as exc:
            print(f"error: {exc}", file=sys.stderr)
            sys.exit(2)
        for pid in stop_orphaned_servers(args.data_dir):
            _say(f"stopped an orphaned Prefect server of {args.data_dir} (pid {pid})")
        yield
