"""Process environment for the CLI entry points: the embedded Prefect home under the data dir, and oneDNN's
primitive cache bounded (it is read when the library starts, so it too is set before the re-execution).

Prefect reads its settings when it is imported, so the entry points set these variables and
re-execute themselves before importing prefect. A user who points ``PREFECT_API_URL`` at a server
keeps it: only the local home, database and result storage move under the data dir.
"""
from __future__ import annotations

import os
import sys
from pathlib import Path

from storage.layout import PREFECT_HOME

MARK = "POLICYBERT_PREFECT_ENV"
STARTUP_TIMEOUT = "PREFECT_SERVER_EPHEMERAL_STARTUP_TIMEOUT_SECONDS"
DEFAULT_STARTUP_TIMEOUT_S = 120  # prefect's own default, 20 s, is too short on a loaded 2-core machine
# oneDNN keeps up to 1,024 compiled primitives (one per op and input shape) for the life of the process; the
# fine-tuning's batches of many lengths fill it. 32 measured the same step time on 2 cores with a 281 MiB lower peak
# over 150 steps (2,686 against 2,967 MiB; 128: 2,824) and ~220 MiB less held after the stage (docs/operations.md)
ONEDNN_CACHE = "ONEDNN_PRIMITIVE_CACHE_CAPACITY"
DEFAULT_ONEDNN_CACHE = 32


def prefect_env(data_dir: str | os.PathLike) -> dict[str, str]:
    """Variables that keep Prefect's home, SQLite database and task results under ``data_dir/.prefect``,
    give the temporary API server ``DEFAULT_STARTUP_TIMEOUT_S`` seconds to start, and bound oneDNN's primitive
    cache to ``DEFAULT_ONEDNN_CACHE`` entries (a value of either variable already in the environment wins)."""
    home = Path(data_dir).resolve() / PREFECT_HOME
    return {
        "PREFECT_HOME": str(home),
        STARTUP_TIMEOUT: os.environ.get(STARTUP_TIMEOUT, str(DEFAULT_STARTUP_TIMEOUT_S)),
        ONEDNN_CACHE: os.environ.get(ONEDNN_CACHE, str(DEFAULT_ONEDNN_CACHE)),
        "PREFECT_LOCAL_STORAGE_PATH": str(home / "storage"),
        "PREFECT_SERVER_ANALYTICS_ENABLED": "false",
        "PREFECT_LOGGING_LOG_PRINTS": "true",
        MARK: str(home),
    }


def reexec_with_prefect_env(data_dir: str | os.PathLike, module: str) -> None:
    """Re-run ``python -m module argv…`` with :func:`prefect_env` set, unless already set."""
    env = prefect_env(data_dir)
    if os.environ.get(MARK) == env[MARK]:
        return
    os.environ.update(env)
    sys.stdout.flush()
    os.execv(sys.executable, [sys.executable, "-m", module, *sys.argv[1:]])

