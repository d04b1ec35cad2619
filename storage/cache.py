"""The pipeline's user cache folder: where what is rebuilt on demand and kept between runs lives (converted
checkpoints, compiled reference engines; SPEC §8). Its place follows the XDG Base Directory Specification."""
from __future__ import annotations

import os
from pathlib import Path

APP_DIR = "policybert-pipeline"


def user_cache_root() -> Path:
    """``$POLICYBERT_CACHE`` when set, else ``$XDG_CACHE_HOME/policybert-pipeline`` (``~/.cache/policybert-pipeline``
    without ``XDG_CACHE_HOME``). Nothing is created."""
    override = os.environ.get("POLICYBERT_CACHE")
    if override:
        return Path(override)
    return Path(os.environ.get("XDG_CACHE_HOME") or Path.home() / ".cache", APP_DIR)
