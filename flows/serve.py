"""The answer page (SPEC §9): ``python -m flows.serve --data-dir data [--host 127.0.0.1 --port 8000]``.

Serves :mod:`answers.web` with uvicorn over the data dir's serving index (``index/CURRENT`` read per request;
nothing written to the data dir). A missing scorer or index is one ``error:`` line and exit 2 before serving.
"""
from __future__ import annotations

import argparse
import sys


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(prog="python -m flows.serve")
    ap.add_argument("--data-dir", required=True)
    ap.add_argument("--host", default="127.0.0.1")
    ap.add_argument("--port", type=int, default=8000)
    ap.add_argument("--scorer", default=None, help="answer scorer JSON (default DATA/answers/scorer.json, then the cache)")
    args = ap.parse_args(argv)
    import uvicorn
    from transformers.utils import logging as hf_logging

    from answers.answer import Answerer
    from answers.backend import IndexMissingError
    from answers.scorer import ScorerMissingError
    from answers.web import create_app

    hf_logging.set_verbosity_error()
    hf_logging.disable_progress_bar()
    try:
        answerer = Answerer(args.data_dir, scorer_path=args.scorer)
        answerer.backend()  # load the serving version (and its encoder) before the first request
        answerer.store()
    except (ScorerMissingError, IndexMissingError, FileNotFoundError, ValueError) as exc:
        print(f"error: {exc}", file=sys.stderr)
        return 2
    import threading

    threading.Thread(target=answerer.warm, name="warm-documents", daemon=True).start()  # beside the first requests
    uvicorn.run(create_app(answerer), host=args.host, port=args.port, log_level="warning")
    return 0


if __name__ == "__main__":
    sys.exit(main())
