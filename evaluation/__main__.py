"""Describe the evaluation sets as the harness loads them (rows per split, files with sha256, how split).

    python -m evaluation [--sets ncpqa,lecoqa,titles,sa] [--clean-dir DATA/documents_clean] [--out sets.json]

``titles`` needs ``--clean-dir``; without it the set is skipped. Exit status 2 with the reason for an unknown set
or a missing or malformed file.
"""
from __future__ import annotations

import argparse
import json
import sys


def main(argv: list[str] | None = None) -> int:
    from evaluation.sets import loader, set_names

    ap = argparse.ArgumentParser(prog="python -m evaluation", description=__doc__.split("\n")[0])
    ap.add_argument("--sets", default=",".join(set_names()))
    ap.add_argument("--clean-dir", default=None, help="documents_clean folder (the titles set)")
    ap.add_argument("--out", default=None, help="write the descriptions here (JSON)")
    args = ap.parse_args(argv)
    out = []
    try:
        for name in [s for s in args.sets.split(",") if s]:
            if name == "titles" and not args.clean_dir:
                print("titles: skipped (no --clean-dir)", file=sys.stderr)
                continue
            where = {"clean_dir": args.clean_dir} if name == "titles" else {}
            out.append(loader(name, **where).load().describe())
            print(json.dumps({k: out[-1][k] for k in ("set", "kind", "rows")}, ensure_ascii=False))
    except (ValueError, FileNotFoundError) as e:
        print(f"error: {e}", file=sys.stderr)
        return 2
    if args.out:
        from storage.atomic import atomic_write_text

        atomic_write_text(args.out, json.dumps(out, indent=1, ensure_ascii=False))
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
