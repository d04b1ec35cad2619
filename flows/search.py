"""Query the serving index: ``python -m flows.search QUERY --data-dir DIR -k 5 [--min-score S]
[--mode hybrid|dense|sparse] [--region R] [--level L] [--issuer I] [--from D] [--to D] [--in-force]
[--no-infer-scope] [--json]``, or a file of questions in one process:
``python -m flows.search --questions FILE.jsonl --data-dir DIR --json``.

Prints one JSON line per hit: score, dense_score, sparse_score, dense_rank, sparse_rank, mode, doc_id,
external_id, title, source, url, start, end, text. An empty query, one over ``--max-query-chars`` chars
a ``-k`` outside 1..``--max-k`` or a ``--min-score`` that is not a finite number (``nan``, ``inf``) is one
``error:`` line and exit 2, before anything loads. ``hybrid`` (default) fuses the dense and BM25 rankings with the
weights fitted when the index version was built (see ``retrieval.fusion``), then applies the version's
reranker when it was published with one (its query pipeline, :mod:`retrieval.pipeline`; ``rerank_score`` printed).

Scoped search (SPEC §7, :mod:`retrieval.scoped`): ``--region`` (a place name or division code, comma-separated for
several), ``--level`` (文件层级), ``--issuer`` (a substring of the issuer), ``--from`` / ``--to`` (YYYY or
YYYY-MM-DD), ``--in-force`` restrict the candidates inside the ranking over the version's policy records (its
``policy_records`` part); without ``--region`` the places the query names scope it (shown, on stderr, as the
scope's label) unless ``--no-infer-scope``. Each hit then also carries ``jurisdiction`` (code, name, level),
``level``, ``issuer``, ``doc_number``, the dates and ``validity`` of its document. A bad filter (unknown place,
over-long value, bad date) is one ``error:`` line and exit 2; so are filters on a version published without
the part (an unscoped search still works there). Inside a scope that names a place the hits are reordered: the
copy the query quotes first, then the asked place's own documents (:mod:`retrieval.scope_order`). ``--json``: one
JSON object ``{"query", "scope", "hits"}``.

``--questions FILE``: one JSON object per line, ``{"qid"|"id", "question"|"query"}`` and optional filter fields
(``region``, ``level``, ``issuer``, ``from``, ``to``, ``in_force``: they replace the command line's); one JSON
line out per line in, in order: ``{"qid", "line", "scope": {... "label"}, "hits": [...]}``, or
``{"qid", "line", "error"}`` for a line that cannot be searched (not JSON, no question, a bad filter).
"""
from __future__ import annotations

import argparse
import json
import math
import sys
from pathlib import Path

from retrieval.query import QueryError, QueryLimits, check_query

FILTER_FLAGS = (("region", "--region"), ("level", "--level"), ("issuer", "--issuer"), ("from", "--from"),
                ("to", "--to"))
MAX_LINE_BYTES = 64 * 1024  # a question line longer than this is an error line, never parsed


FIELDS = ("score", "dense_score", "sparse_score", "dense_rank", "sparse_rank", "mode", "doc_id", "external_id", "title",
          "source", "url", "start", "end", "text", "rerank_score")


def add_filter_args(parser: argparse.ArgumentParser, what: str = "query") -> None:
    """The scope flags of ``flows.search`` and ``flows.ask`` (read back by :func:`filters_from_args`)."""
    parser.add_argument("--region", help="places (names or division codes, comma-separated)")
    parser.add_argument("--level", help="document levels (文件层级, comma-separated)")
    parser.add_argument("--issuer", help="issuer substrings (comma-separated)")
    parser.add_argument("--from", help="earliest date (YYYY or YYYY-MM-DD)")
    parser.add_argument("--to", help="latest date (YYYY or YYYY-MM-DD)")
    parser.add_argument("--in-force", action="store_true", help="only documents known to be in force (有效)")
    parser.add_argument("--no-infer-scope", action="store_true", help=f"do not scope by the places the {what} names")


def filters_from_args(args) -> dict:
    """The filter fields the command line gives (:func:`add_filter_args`)."""
    out = {name: getattr(args, flag[2:].replace("-", "_")) for name, flag in FILTER_FLAGS}
    out["in_force"] = bool(args.in_force) or None
    return {k: v for k, v in out.items() if v is not None}


def _hit_row(bundle, hit, scoped: bool) -> dict:
    """One hit as printed: :data:`FIELDS`, then (``scoped``: the version has policy records) its document's
    policy fields (:func:`retrieval.scoped.policy_fields`)."""
    row = hit.to_dict()  # rendered here, the one place (retrieval.hits.SearchHit.to_dict)
    out = {k: row.get(k) for k in FIELDS}
    if scoped:
        from retrieval.scoped import policy_fields

        out.update(policy_fields(bundle, hit.doc_id))
    return out


def _search(bundle, query: str, args, filters: dict) -> tuple[dict, list[dict]]:
    """``(scope payload, hit rows)`` of one scoped query (raises ValueError / QueryError for a bad request)."""
    from retrieval.policy_records import POLICY_RECORDS
    from retrieval.scoped import request_scope, scope_order, scope_payload, scoped_docs

    scope, docs = scoped_docs(bundle, request_scope(query, filters, infer=not args.no_infer_scope))
    hits = bundle.pipeline.search(query, args.k, args.mode, docs=docs, order=scope_order(bundle, scope))
    hits = [h for h in hits if args.min_score is None or h.score >= args.min_score]
    return scope_payload(scope), [_hit_row(bundle, h, bundle.has_part(POLICY_RECORDS)) for h in hits]


def _batch(bundle, path: str, args, limits: QueryLimits, cli_filters: dict) -> int:
    """Search every line of the JSON Lines file ``path``; one JSON line out per line in, in order (an
    ``error`` line for one that cannot be searched: the others go on)."""
    from retrieval.scoped import filters_of

    with open(path, "rb") as fh:
        for n, raw in enumerate(fh, 1):
            if n == 1 and raw.startswith(b"\xef\xbb\xbf"):
                raw = raw[3:]
            if not raw.strip():
                continue
            out: dict = {"qid": None, "line": n}
            try:
                if len(raw) > MAX_LINE_BYTES:
                    raise ValueError(f"line longer than {MAX_LINE_BYTES} bytes")
                rec = json.loads(raw.decode("utf-8"))
                if not isinstance(rec, dict):
                    raise ValueError("not a JSON object")
                qid = rec.get("qid", rec.get("id"))
                out["qid"] = qid if isinstance(qid, (str, int)) and not isinstance(qid, bool) else None
                query = rec.get("question", rec.get("query"))
                if not isinstance(query, str):
                    raise ValueError("no question (a string under question or query)")
                query.encode("utf-8")
                query = check_query(query, args.k, limits)
                out["scope"], out["hits"] = _search(bundle, query, args, {**cli_filters, **filters_of(rec)})
            except UnicodeError:
                out = {"qid": None, "line": n, "error": "text that is not valid UTF-8 / Unicode"}
            except RecursionError:
                out["error"] = "not JSON (nested too deep)"
            except ValueError as exc:  # JSONDecodeError, QueryError, a bad filter, ScopeError
                out["error"] = str(exc)[:300]
            print(_json_line(out), flush=True)
    return 0


def _json_line(out: dict) -> str:
    text = json.dumps(out, ensure_ascii=False, default=str)
    try:
        text.encode("utf-8")
    except UnicodeEncodeError:
        text = json.dumps({"qid": None, "line": out.get("line"), "error": "record holds text that is not valid Unicode"})
    return text


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="python -m flows.search")
    parser.add_argument("query", nargs="?")
    parser.add_argument("--questions", help="JSON Lines file: qid (or id), question (or query), filter fields")
    parser.add_argument("--data-dir", required=True)
    parser.add_argument("-k", type=int, default=5)
    parser.add_argument("--min-score", type=float, default=None, help="drop hits whose score (of the mode) is lower")
    parser.add_argument("--mode", choices=("hybrid", "dense", "sparse"), default="hybrid")
    parser.add_argument("--max-k", type=int, default=QueryLimits.max_k, help="largest k accepted")
    parser.add_argument("--max-query-chars", type=int, default=QueryLimits.max_chars, help="longest query accepted")
    add_filter_args(parser)
    parser.add_argument("--json", action="store_true", help="one JSON object (query, scope, hits); batch: JSON lines")
    args = parser.parse_args(argv)
    limits = QueryLimits(max_k=args.max_k, max_chars=args.max_query_chars)
    filters = filters_from_args(args)
    try:  # before the index and the encoder load
        if (args.query is None) == (args.questions is None):
            raise QueryError("give one query or --questions FILE")
        if args.query is not None:
            check_query(args.query, args.k, limits)
        else:
            check_query("?", args.k, limits)
            if not Path(args.questions).is_file():
                raise QueryError(f"{args.questions} not found")
        if args.min_score is not None and not math.isfinite(args.min_score):
            raise QueryError(f"--min-score {args.min_score}: must be a finite number")
        from retrieval.scope import parse_filters

        parse_filters(filters)
    except ValueError as exc:  # QueryError, a bad filter
        print(f"error: {exc}", file=sys.stderr)
        return 2
    from transformers.utils import logging as hf_logging

    from retrieval.bundle import load_bundle
    from retrieval.parts import PartError
    from retrieval.pinning import EncoderMismatchError
    from storage import layout as L

    hf_logging.set_verbosity_error()
    hf_logging.disable_progress_bar()
    try:
        bundle = load_bundle(Path(args.data_dir) / L.INDEX, limits=limits)
        if args.questions:
            return _batch(bundle, args.questions, args, limits, filters)
        scope, rows = _search(bundle, args.query, args, filters)
    except (FileNotFoundError, EncoderMismatchError, PartError, ValueError) as exc:
        print(f"error: {exc}", file=sys.stderr)
        return 2
    if args.json:
        print(json.dumps({"query": args.query, "scope": scope, "hits": rows}, ensure_ascii=False, default=str))
        return 0
    if scope["label"] != "范围：不限":
        print(scope["label"] + ("（由问题推断）" if scope["inferred"] else ""), file=sys.stderr)
    for row in rows:
        print(json.dumps(row, ensure_ascii=False, default=str))
    return 0


if __name__ == "__main__":
    sys.exit(main())
