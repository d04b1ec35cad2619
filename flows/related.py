"""Related documents from the serving index version (SPEC §12): ``python -m flows.related DOC_ID --data-dir D
[-k 10] [--version vN] [--id-column doc_id|external_id]`` prints one JSON line per related document
(``doc_id, title, score, external_id``, and ``link`` when the two name each other in 《》), best first, scored by
the version's ``related`` part (the fused ranking of BM25, mean vectors, LTM-B and typed links, docs/related.md).

``--pairs FILE`` (JSON Lines with two ids ``a``, ``b``, read as ``--id-column``) instead prints each line back
with its ``score`` (the fused score: ``b``'s score in ``a``'s list). A missing part, an unknown id or a bad pair
file is one ``error:`` line and exit 2.
"""
from __future__ import annotations

import argparse
import json
import sys
from pathlib import Path


def main(argv: list[str] | None = None) -> int:
    p = argparse.ArgumentParser(prog="python -m flows.related")
    p.add_argument("doc_id", nargs="?")
    p.add_argument("--data-dir", required=True)
    p.add_argument("-k", type=int, default=10)
    p.add_argument("--version", help="index version (default: the serving one)")
    p.add_argument("--pairs", help="JSON Lines of id pairs {a, b} to score")
    p.add_argument("--id-column", choices=("doc_id", "external_id"), default="doc_id")
    a = p.parse_args(argv)
    if (a.doc_id is None) == (a.pairs is None) or a.k < 1:
        print("error: give one DOC_ID or --pairs FILE, and -k >= 1", file=sys.stderr)
        return 2
    from docmatch import load
    from retrieval.bundle import resolve_version
    from storage import layout as L

    try:
        root = Path(a.data_dir) / L.INDEX
        rel = load(root / resolve_version(root, a.version)[0])
        lines = _pairs(rel, a.pairs, a.id_column) if a.pairs else rel.related(rel.resolve(a.doc_id, a.id_column), a.k)
    except (OSError, ValueError, KeyError) as exc:
        print(f"error: {exc.args[0] if isinstance(exc, KeyError) else exc}", file=sys.stderr)
        return 2
    for row in lines:
        print(json.dumps(row, ensure_ascii=False))
    return 0


def _pairs(rel, path: str, column: str) -> list[dict]:
    """Each line of the pair file with ``score`` added (ids read as ``column``).

    Raises:
        ValueError: a line that is not UTF-8 JSON (a leading byte order mark allowed), nested too deep, or not an
            object with ``a`` and ``b``. KeyError: an unknown id (echoed cut to 80 chars).
    """
    rows, pairs = [], []
    for i, line in enumerate(Path(path).read_text(encoding="utf-8-sig").splitlines(), 1):  # a BOM is the file's
        if not line.strip():
            continue
        try:
            d = json.loads(line)
        except (ValueError, RecursionError):
            raise ValueError(f"{path}:{i}: not a JSON line (or nested too deep)") from None
        if not isinstance(d, dict) or "a" not in d or "b" not in d:
            raise ValueError(f"{path}:{i}: a pair needs the ids 'a' and 'b'")
        rows.append(d)
        pairs.append((rel.resolve(str(d["a"]), column), rel.resolve(str(d["b"]), column)))
    # one call: a fused part ranks each ``a`` once for all its pairs
    return [{**d, "score": s} for d, s in zip(rows, rel.score(pairs))]


if __name__ == "__main__":
    sys.exit(main())
