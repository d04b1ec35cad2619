"""The answer page (SPEC §9): ``python -m flows.serve --data-dir data [--host 127.0.0.1 --port 8000]``.

Serves :mod:`answers.web` with uvicorn over the data dir's serving index (``index/CURRENT`` read per request;
nothing written to the data dir). A missing scorer or index is one ``error:`` line and exit 2 before serving.
uvicorn is bounded by :data:`UVICORN_LIMITS` (connections, keep-alive, header bytes) and the app by
:class:`answers.web.Limits` (body bytes and seconds, questions answered at once); errors while serving are
logged to stderr, never shown on the page.
"""
from __future__ import annotations

import argparse
import sys

# uvicorn's own bounds in front of answers.web.Limits: connections and requests in flight (more get 503),
# seconds an idle keep-alive connection is held, bytes of a request line and headers not yet complete
UVICORN_LIMITS = {"limit_concurrency": 64, "timeout_keep_alive": 5, "h11_max_incomplete_event_size": 16 * 1024}


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(prog="python -m flows.serve")
    ap.add_argument("--data-dir", required=True)
    ap.add_argument("--host", default="127.0.0.1")
    ap.add_argument("--port", type=int, default=8000)
    args = ap.parse_args(argv)
    import uvicorn
    from transformers.utils import logging as hf_logging

    from answers.answer import Answerer
    from answers.scorer import ScorerMissingError
    from retrieval.bundle import IndexMissingError
    from retrieval.parts import PartError
    from answers.web import Limits, create_app

    hf_logging.set_verbosity_error()
    hf_logging.disable_progress_bar()
    try:
        answerer = Answerer(args.data_dir)
        answerer.check()  # the serving version, its encoder, texts and scorer, before the first request
    except (ScorerMissingError, IndexMissingError, PartError, FileNotFoundError, ValueError) as exc:
        print(f"error: {exc}", file=sys.stderr)
        return 2
    import threading

    threading.Thread(target=answerer.warm, name="warm-documents", daemon=True).start()  # beside the first requests
    from answers.related_view import RelatedViews

    related = RelatedViews(args.data_dir)  # the version's related-policies model (SPEC §12), loaded at start-up
    threading.Thread(target=related.warm, name="warm-related", daemon=True).start()
    import logging

    logging.basicConfig(level=logging.WARNING, format="%(asctime)s %(levelname)s %(name)s: %(message)s")
    limits = Limits()
    uvicorn.run(create_app(answerer, limits, related), host=args.host, port=args.port, log_level="warning",
                server_header=False, **UVICORN_LIMITS)
    return 0


if __name__ == "__main__":
    sys.exit(main())
