"""API keys of the answer service (SPEC §9): ``python -m flows.keys create|list|revoke --data-dir DATA``.

``create --name N`` prints the new key once (only its SHA-256 is kept, in ``DATA/service/keys.json``,
:mod:`answers.service.keys`); ``list`` prints each key's id, name and creation time; ``revoke NAME_OR_ID``
removes one. A running ``flows.serve`` sees the change within a second. A bad name, an unknown key or an
unreadable key file is one ``error:`` line and exit 2.
"""
from __future__ import annotations

import argparse
import sys
from pathlib import Path


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(prog="python -m flows.keys")
    ap.add_argument("action", choices=("create", "list", "revoke"))
    ap.add_argument("which", nargs="?", help="revoke: the key's name or id")
    ap.add_argument("--data-dir", required=True)
    ap.add_argument("--name", help="create: the key's name (1-64 of A-Z a-z 0-9 . _ -)")
    args = ap.parse_args(argv)
    from answers.service.keys import KeyStore, KeyStoreError

    if not Path(args.data_dir).is_dir():
        print(f"error: data dir {args.data_dir} does not exist", file=sys.stderr)
        return 2
    store = KeyStore(args.data_dir)
    try:
        if args.action == "create":
            if not args.name:
                raise KeyStoreError("create needs --name")
            key, rec = store.create(args.name)
            print(f"created key {rec['name']} (id {rec['id']}); it is shown once, keep it:", file=sys.stderr)
            print(key)
        elif args.action == "list":
            for rec in store.list():
                print(f"{rec['id']}  {rec['name']}  {rec['created']}")
        else:
            if not (args.which or args.name):
                raise KeyStoreError("revoke needs the key's name or id")
            rec = store.revoke(args.which or args.name)
            print(f"revoked key {rec['name']} (id {rec['id']})")
    except (KeyStoreError, OSError) as exc:
        print(f"error: {exc}", file=sys.stderr)
        return 2
    return 0


if __name__ == "__main__":
    sys.exit(main())
