"""The index versions of a data dir, from the command line (SPEC §7; :mod:`retrieval.versions`):

    python -m flows.versions list --data-dir data [--verify] # one JSON line per version: serving, pinned, parts
    python -m flows.versions rollback v3 --data-dir data     # serve v3 again: encoder, texts, scorer, reranker
    python -m flows.versions pin v3 --data-dir data [--unpin]  # keep v3 from retention

A version is the unit serving loads, so a rollback restores everything a query reads (its parts are checked
against their sha256 when it is loaded). A rollback first verifies the version as serving would load it
(:func:`retrieval.verify.verify_version`) and refuses a damaged one. A version that is not on disk, or a bad name, is one ``error:`` line and
exit 2.
"""
from __future__ import annotations

import argparse
import json
import sys
from pathlib import Path


def _row(index: Path, version: str, serving: str | None, pinned: list[str], verify: bool = False) -> dict:
    from retrieval.versions import read_manifest

    try:
        man = read_manifest(index, version)
    except (OSError, ValueError) as exc:
        return {"version": version, "error": str(exc)}
    parts = {name: ("refused: " + rec["refused"]) if "refused" in rec else rec.get("sha256", "")[:16]
             for name, rec in (man.get("parts") or {}).items() if isinstance(rec, dict)}
    row = {"version": version, "serving": version == serving, "pinned": version in pinned,
           "chunks": man.get("chunks"), "encoder": man.get("model_id"), "parts": parts}
    if verify:
        from retrieval.verify import verify_version

        row["verified"] = verify_version(index, version).summary()
    return row


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(prog="python -m flows.versions")
    ap.add_argument("action", choices=("list", "rollback", "pin"))
    ap.add_argument("version", nargs="?")
    ap.add_argument("--data-dir", required=True)
    ap.add_argument("--unpin", action="store_true", help="with pin: remove the version from the pinned list")
    ap.add_argument("--verify", action="store_true",
                    help="with list: check every file of each version as serving loads it (reads them all)")
    args = ap.parse_args(argv)
    from retrieval.versions import (check_version, current_version, list_versions, pin_version, pinned_versions,
                                    rollback)

    index = Path(args.data_dir) / "index"
    try:
        if args.action == "list":
            serving, pinned = current_version(index), pinned_versions(index)
            for v in list_versions(index):
                print(json.dumps(_row(index, v, serving, pinned, args.verify), ensure_ascii=False))
            return 0
        if not args.version:
            raise ValueError(f"{args.action} needs a version (vN)")
        version = check_version(args.version, "the version argument")
        if args.action == "rollback":
            from retrieval.verify import verify_version

            report = verify_version(index, version) if (index / version).is_dir() else None
            if report is not None and not report.ok:  # refuse what serving would refuse to load
                raise ValueError(f"{report.summary()}: not rolled back")
            rollback(index, version)
            print(f"serving {version}")
        else:
            print(json.dumps(pin_version(index, version, pinned=not args.unpin)))
    except (OSError, ValueError) as exc:
        print(f"error: {exc}", file=sys.stderr)
        return 2
    return 0


if __name__ == "__main__":
    sys.exit(main())
