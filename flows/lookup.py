"""Look a policy up in the serving index: ``python -m flows.lookup --data-dir DIR QUERY [--json]``.

``QUERY`` names a document by its 文号 in any spelling (``国发〔2019〕5号``, ``国发[2019]5号``, ``国发（2019）第5号``)
or its title (``《浙江省公共数据条例》``; without 《》 the query less its 第…条 is read as the title), optionally with an
article (``《X》第十条``, ``国发〔2019〕5号第三条``); :mod:`retrieval.lookup` finds it over the serving version's
own parts (texts and policy records; no encoder is loaded). Same-titled documents (the same-named regulations
of two provinces) are all shown, each with its jurisdiction.

Prints, per document, one line ``doc_id  《title》  jurisdiction · level · 文号 · validity  (match)`` and, when an
article is asked, its text; ``--json``: one JSON object ``{query, reference, version, found, reason, total,
documents}`` (:meth:`retrieval.lookup.Catalog.lookup`). Exit 0 found, 1 not found (the reason on stderr, ``not
found: …``), 2 a bad query (empty, over 300 chars, control characters, no document named) or an index that cannot
be read: one ``error:`` line, a bad query before anything loads.
"""
from __future__ import annotations

import argparse
import json
import sys
from pathlib import Path


def _render(r: dict) -> list[str]:
    """The readable lines of a lookup result."""
    out = []
    for d in r["documents"]:
        place = (d.get("jurisdiction") or {}).get("name") or "地区未知"
        fields = " · ".join(str(x) for x in (place, d.get("level"), d.get("doc_number"), d.get("validity")) if x)
        out.append(f"{d['doc_id']}  《{d.get('title') or ''}》  {fields}  ({d['match']})")
        if "article" in d:
            a = d["article"]
            out.append(f"  {a['text']}" if a else "  （无此条）")
    if r["total"] > len(r["documents"]):
        out.append(f"… {r['total'] - len(r['documents'])} more")
    return out


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="python -m flows.lookup")
    parser.add_argument("query", help="a 文号 or 《title》, optionally with 第…条")
    parser.add_argument("--data-dir", required=True)
    parser.add_argument("--json", action="store_true", help="one JSON object")
    args = parser.parse_args(argv)
    from retrieval.lookup import parse_query

    try:  # before the index loads
        parse_query(args.query)
    except ValueError as exc:
        print(f"error: {exc}", file=sys.stderr)
        return 2
    from retrieval.lookup import Lookups
    from retrieval.parts import PartError
    from storage import layout as L

    try:
        r = Lookups(Path(args.data_dir) / L.INDEX).lookup(args.query)
    except (FileNotFoundError, PartError, ValueError) as exc:  # IndexMissingError, IndexLoadError
        print(f"error: {exc}", file=sys.stderr)
        return 2
    if args.json:
        print(json.dumps(r, ensure_ascii=False, default=str))
    elif r["documents"]:
        print("\n".join(_render(r)))
    if not r["found"]:
        print(f"not found: {r['reason']}", file=sys.stderr)
        return 1
    return 0


if __name__ == "__main__":
    sys.exit(main())
