"""Load on the exposed answer service (SPEC §9), one run:

    python bench/load_bench.py --data-dir DATA [--workers 2] [--clients 1,8,32] [--requests 200] [--seconds 60]

Starts ``python -m flows.serve --workers N`` on a free loopback port over ``DATA`` (rate limits off, keys as
the data dir has them: give ``--key`` when it has some), waits for ``/readyz``, warms every worker, then for
each concurrency level runs that many asyncio clients (httpx, one connection each) asking ``GET /api/answer``
for questions in turn until ``--requests`` are done or ``--seconds`` have passed; reports p50/p95 seconds,
requests per second and errors (any status but 200, or a failed connection) per level. Beside it, one client
in this process runs the hybrid search ``flows.search`` runs (``Retriever.search(q, 5)``) over the same
questions: the cost of retrieval alone. Questions: ``--questions`` (JSONL with ``question``), else the NCPQA
file of the shared data when present, else the questions of the test builders. Prints one JSON object.
"""
from __future__ import annotations

import argparse
import asyncio
import json
import os
import socket
import subprocess
import sys
import time
from pathlib import Path

import numpy as np

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))
NCPQA = ROOT.parent / "shared" / "qa" / "ncpqa_questions.jsonl"


def _questions(path: str | None, n: int) -> list[str]:
    p = Path(path) if path else (NCPQA if NCPQA.is_file() else None)
    if p is None:
        from tests.answer_builders import questions

        return questions()["question"].tolist()[:n]
    out = []
    with open(p, encoding="utf-8") as fh:
        for line in fh:
            if line.strip():
                out.append(json.loads(line)["question"])
            if len(out) >= n:
                break
    return out


def _pct(xs, q):
    return round(float(np.percentile(np.asarray(xs), q)), 4) if xs else None


def start_server(data_dir: str, workers: int, timeout_s: float = 300):
    """``flows.serve --workers N`` on a free port, ready (``/readyz`` 200); returns (process, base URL)."""
    import httpx

    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        port = s.getsockname()[1]
    proc = subprocess.Popen([sys.executable, "-m", "flows.serve", "--data-dir", data_dir, "--port", str(port),
                             "--workers", str(workers), "--rate", "", "--rate-address", ""], cwd=ROOT,
                            stderr=subprocess.DEVNULL)
    url = f"http://127.0.0.1:{port}"
    deadline = time.monotonic() + timeout_s
    while True:
        try:
            if httpx.get(url + "/readyz", timeout=5).status_code == 200:
                return proc, url
        except httpx.HTTPError:
            pass
        if proc.poll() is not None or time.monotonic() > deadline:
            proc.kill()
            raise SystemExit(f"error: flows.serve did not get ready (exit {proc.poll()})")
        time.sleep(1)


async def level(url: str, questions: list[str], clients: int, n: int, seconds: float, key: str | None) -> dict:
    """``clients`` concurrent clients, ``n`` requests at most, ``seconds`` at most: latencies and errors."""
    import httpx

    lat, errors, codes = [], 0, {}
    todo = iter(range(n))
    end = time.monotonic() + seconds
    headers = {"X-API-Key": key} if key else {}

    async def client():
        nonlocal errors
        async with httpx.AsyncClient(base_url=url, timeout=60, headers=headers,
                                     limits=httpx.Limits(max_connections=1)) as c:
            for i in todo:
                if time.monotonic() > end:
                    return
                t = time.perf_counter()
                try:
                    r = await c.get("/api/answer", params={"q": questions[i % len(questions)], "k": 3})
                    codes[r.status_code] = codes.get(r.status_code, 0) + 1
                    ok = r.status_code == 200
                except httpx.HTTPError:
                    ok = False
                lat.append(time.perf_counter() - t)
                errors += not ok

    t0 = time.perf_counter()
    await asyncio.gather(*(client() for _ in range(clients)))
    wall = time.perf_counter() - t0
    return {"clients": clients, "requests": len(lat), "p50_s": _pct(lat, 50), "p95_s": _pct(lat, 95),
            "rps": round(len(lat) / wall, 2), "errors": errors, "statuses": {str(k): v for k, v in codes.items()}}


def search_alone(data_dir: str, questions: list[str]) -> dict:
    """p50/p95 of ``Retriever.search(q, 5)`` in this process, one client, after one warm-up search."""
    from retrieval.retrievers import Retriever

    retr = Retriever(Path(data_dir) / "index")
    retr.search(questions[0], 5)
    lat = []
    for q in questions:
        t = time.perf_counter()
        retr.search(q, 5)
        lat.append(time.perf_counter() - t)
    return {"clients": 1, "requests": len(lat), "p50_s": _pct(lat, 50), "p95_s": _pct(lat, 95)}


def main(argv=None) -> int:
    ap = argparse.ArgumentParser(prog="python bench/load_bench.py")
    ap.add_argument("--data-dir", required=True)
    ap.add_argument("--workers", type=int, default=2)
    ap.add_argument("--clients", default="1,8,32")
    ap.add_argument("--requests", type=int, default=200, help="per level, at most")
    ap.add_argument("--seconds", type=float, default=60, help="per level, at most")
    ap.add_argument("--questions", default=None)
    ap.add_argument("--n-questions", type=int, default=100)
    ap.add_argument("--key", default=os.environ.get("ANSWER_SERVICE_KEY"), help="an API key, when DATA has keys")
    args = ap.parse_args(argv)
    if not (Path(args.data_dir) / "index" / "CURRENT").is_file():
        print(f"error: {args.data_dir} has no published index (index/CURRENT)", file=sys.stderr)
        return 2
    try:
        levels = [int(x) for x in args.clients.split(",")]
    except ValueError:
        print(f"error: --clients must be integers separated by commas, got {args.clients!r}", file=sys.stderr)
        return 2
    qs = _questions(args.questions, args.n_questions)
    proc, url = start_server(args.data_dir, args.workers)
    try:
        asyncio.run(level(url, qs, args.workers * 2, args.workers * 4, 60, args.key))  # warm every worker
        out = {"data_dir": str(args.data_dir), "workers": args.workers, "questions": len(qs), "levels": [
            asyncio.run(level(url, qs, c, args.requests, args.seconds, args.key)) for c in levels]}
    finally:
        proc.terminate()
        proc.wait(30)
    out["search_alone"] = search_alone(args.data_dir, qs)
    print(json.dumps(out, ensure_ascii=False, indent=1))
    return 0


if __name__ == "__main__":
    sys.exit(main())
