"""Query the serving index: ``python -m flows.search QUERY --data-dir DIR -k 5 [--min-score S]
[--mode hybrid|dense|sparse]``.

Prints one JSON line per hit: score, dense_score, sparse_score, dense_rank, sparse_rank, mode, doc_id,
external_id, title, source, url, start, end, text. An empty query, one over ``--max-query-chars`` chars
a ``-k`` outside 1..``--max-k`` or a ``--min-score`` that is not a finite number (``nan``, ``inf``) is one
``error:`` line and exit 2, before anything loads. ``hybrid`` (default) fuses the dense and BM25 rankings with the
weights fitted when the index version was built (see ``retrieval.fusion``), then applies the version's
reranker when it was published with one (its query pipeline, :mod:`retrieval.pipeline`; ``rerank_score`` printed).
"""
from __future__ import annotations

import argparse
import json
import math
import sys
from pathlib import Path

from retrieval.query import QueryError, QueryLimits, check_query


FIELDS = ("score", "dense_score", "sparse_score", "dense_rank", "sparse_rank", "mode", "doc_id", "external_id", "title",
          "source", "url", "start", "end", "text", "rerank_score")


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="python -m flows.search")
    parser.add_argument("query")
    parser.add_argument("--data-dir", required=True)
    parser.add_argument("-k", type=int, default=5)
    parser.add_argument("--min-score", type=float, default=None, help="drop hits whose score (of the mode) is lower")
    parser.add_argument("--mode", choices=("hybrid", "dense", "sparse"), default="hybrid")
    parser.add_argument("--max-k", type=int, default=QueryLimits.max_k, help="largest k accepted")
    parser.add_argument("--max-query-chars", type=int, default=QueryLimits.max_chars, help="longest query accepted")
    args = parser.parse_args(argv)
    limits = QueryLimits(max_k=args.max_k, max_chars=args.max_query_chars)
    try:  # before the index and the encoder load
        check_query(args.query, args.k, limits)
        if args.min_score is not None and not math.isfinite(args.min_score):
            raise QueryError(f"--min-score {args.min_score}: must be a finite number")
    except QueryError as exc:
        print(f"error: {exc}", file=sys.stderr)
        return 2
    from transformers.utils import logging as hf_logging

    from retrieval.bundle import load_bundle
    from retrieval.pinning import EncoderMismatchError
    from storage import layout as L

    hf_logging.set_verbosity_error()
    hf_logging.disable_progress_bar()
    try:
        hits = load_bundle(Path(args.data_dir) / L.INDEX, limits=limits).pipeline.search(args.query, args.k, args.mode)
        hits = [h for h in hits if args.min_score is None or h.score >= args.min_score]
    except (FileNotFoundError, EncoderMismatchError, ValueError) as exc:
        print(f"error: {exc}", file=sys.stderr)
        return 2
    for h in hits:  # rendered here, the one place (retrieval.hits.SearchHit.to_dict)
        row = h.to_dict()
        print(json.dumps({k: row.get(k) for k in FIELDS}, ensure_ascii=False, default=str))
    return 0


if __name__ == "__main__":
    sys.exit(main())
