"""Benchmark of the main job (SPEC §1: every stage cached and resumable): a full run and a rerun with nothing
changed, in one invocation, on the real corpus with a fresh data dir.

    python bench/pipeline_bench.py --input ../shared/corpus/policy_docs.csv [--profile cpu-small]

Prints wall seconds of each run (including Prefect's temporary server start) and their ratio,
plus per-stage task durations read from the Prefect logs of the first run.
"""
from __future__ import annotations

import argparse
import re
import shutil
import subprocess
import sys
import tempfile
import time
from pathlib import Path

REPO = Path(__file__).resolve().parent.parent
_FINISHED = re.compile(r"^(\d\d:\d\d:\d\d\.\d+) \| INFO +\| Task run '([\w-]+)-\w{3}' - Finished in state (\w+)")
_BEGIN = re.compile(r"^(\d\d:\d\d:\d\d\.\d+) \| INFO +\| Flow run .* - Beginning flow run")


def _secs(stamp: str) -> float:
    h, m, s = stamp.split(":")
    return int(h) * 3600 + int(m) * 60 + float(s)


def run(input_csv: str, data_dir: Path, profile: str) -> tuple[float, str]:
    t0 = time.perf_counter()
    proc = subprocess.run([sys.executable, "-m", "flows.pipeline", "--input", input_csv, "--data-dir", str(data_dir),
                           "--profile", profile], cwd=REPO, capture_output=True, text=True)
    wall = time.perf_counter() - t0
    if proc.returncode != 0:
        sys.stderr.write(proc.stdout[-4000:] + proc.stderr[-4000:])
        raise SystemExit(f"pipeline failed with exit code {proc.returncode}")
    return wall, proc.stdout + proc.stderr


def stage_times(log: str) -> list[tuple[str, float, str]]:
    """(task, seconds since the previous event, final state) from Prefect's log lines."""
    out, last = [], None
    for line in log.splitlines():
        if m := _BEGIN.match(line):
            last = _secs(m.group(1))
        elif (m := _FINISHED.match(line)) and last is not None:
            t = _secs(m.group(1))
            out.append((m.group(2), t - last, m.group(3)))
            last = t
    return out


def main() -> None:
    ap = argparse.ArgumentParser()
    ap.add_argument("--input", default=str(REPO.parent / "shared" / "corpus" / "policy_docs.csv"))
    ap.add_argument("--profile", default="cpu-small")
    ap.add_argument("--keep", action="store_true", help="keep the data dir")
    args = ap.parse_args()
    data = Path(tempfile.mkdtemp(prefix="bench-pipeline-"))
    try:
        full, log1 = run(args.input, data, args.profile)
        rerun, log2 = run(args.input, data, args.profile)
        print(f"profile {args.profile}, input {args.input}")
        print(f"{'stage':<18}{'full s':>9}{'rerun s':>9}  rerun state")
        for (name, s1, _), (_, s2, st2) in zip(stage_times(log1), stage_times(log2)):
            print(f"{name:<18}{s1:>9.1f}{s2:>9.2f}  {st2}")
        print(f"full run:  {full:7.1f} s wall (target <= 900 s)")
        print(f"rerun:     {rerun:7.1f} s wall (target <= 60 s)")
        print(f"ratio rerun/full: {rerun / full:.3f}")
        summary = log1[log1.find("== policy-pipeline summary"):]
        print(summary[:summary.find("Finished in state")].rsplit("\n", 1)[0])
    finally:
        if not args.keep:
            shutil.rmtree(data, ignore_errors=True)


if __name__ == "__main__":
    main()
