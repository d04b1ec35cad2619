"""API keys of the answer service (SPEC §9), hashed at rest in ``DATA/service/keys.json``.

A key is ``pa_`` + 32 random bytes in URL-safe base64 (:func:`secrets.token_urlsafe`); only its SHA-256 is
stored (a key of 256 random bits needs no slow hash: no dictionary reaches it), beside its name, a short id
(the hash's first 12 hex digits, to revoke by) and its creation time. The file is rewritten atomically
(:func:`storage.atomic_write_text`); the server re-reads it when its modification time changes, so keys
created or revoked by ``python -m flows.keys`` apply without a restart.
"""
from __future__ import annotations

import hashlib
import hmac
import json
import os
import re
import secrets
import threading
import time
from pathlib import Path

from storage import atomic_write_text

KEY_PREFIX = "pa_"
NAME_RE = re.compile(r"^[A-Za-z0-9][A-Za-z0-9._-]{0,63}$")


class KeyStoreError(ValueError):
    """A key store request that cannot be done (bad name, duplicate name, unknown key, unreadable file)."""


def key_hash(key: str) -> str:
    """Hex SHA-256 of a key's UTF-8 bytes (64 chars)."""
    return hashlib.sha256(key.encode("utf-8", "surrogatepass")).hexdigest()


def keys_file(data_dir) -> Path:
    """``DATA/service/keys.json``."""
    return Path(data_dir) / "service" / "keys.json"


class KeyStore:
    """The keys of one data dir: :meth:`create`, :meth:`list`, :meth:`revoke` (the CLI) and :meth:`lookup`
    (the server; re-reads the file when it changed, at most once a second)."""

    def __init__(self, data_dir):
        self.path = keys_file(data_dir)
        self._lock = threading.Lock()
        self._seen: tuple[float, int] | None = None
        self._by_hash: dict[str, dict] = {}
        self._checked = 0.0

    def _read(self) -> list[dict]:
        if not self.path.is_file():
            return []
        try:
            data = json.loads(self.path.read_text(encoding="utf-8"))
            keys = data["keys"]
            assert isinstance(keys, list) and all(isinstance(k, dict) and "sha256" in k for k in keys)
            return keys
        except (ValueError, KeyError, TypeError, AssertionError, UnicodeDecodeError) as exc:
            raise KeyStoreError(f"{self.path} is not a key file ({type(exc).__name__})") from None

    def _write(self, keys: list[dict]) -> None:
        atomic_write_text(self.path, json.dumps({"format": "answer-service-keys/1", "keys": keys}, indent=1))

    def create(self, name: str) -> tuple[str, dict]:
        """A new key named ``name``: (the key, shown once; its record without the hash).

        Raises:
            KeyStoreError: ``name`` is not 1-64 chars of [A-Za-z0-9._-] or is taken by a live key.
        """
        if not isinstance(name, str) or not NAME_RE.match(name):
            raise KeyStoreError(f"key name must be 1-64 characters of A-Z a-z 0-9 . _ -, got {str(name)[:70]!r}")
        with self._lock:
            keys = self._read()
            if any(k.get("name") == name for k in keys):
                raise KeyStoreError(f"a key named {name!r} exists (revoke it first)")
            key = KEY_PREFIX + secrets.token_urlsafe(32)
            h = key_hash(key)
            rec = {"id": h[:12], "name": name, "sha256": h, "created": time.strftime("%Y-%m-%dT%H:%M:%SZ",
                                                                                      time.gmtime())}
            self._write([*keys, rec])
        return key, {k: v for k, v in rec.items() if k != "sha256"}

    def list(self) -> list[dict]:
        """The keys' records (id, name, created), never their hashes."""
        return [{k: v for k, v in rec.items() if k != "sha256"} for rec in self._read()]

    def revoke(self, which: str) -> dict:
        """Remove the key whose name or id is ``which``; returns its record.

        Raises:
            KeyStoreError: no such key.
        """
        with self._lock:
            keys = self._read()
            hit = [k for k in keys if which in (k.get("name"), k.get("id"))]
            if not hit:
                raise KeyStoreError(f"no key named or with id {which!r}")
            self._write([k for k in keys if k not in hit])
        return {k: v for k, v in hit[0].items() if k != "sha256"}

    def _refresh(self) -> None:
        now = time.monotonic()
        if now - self._checked < 1.0 and self._seen is not None:
            return
        self._checked = now
        try:
            st = os.stat(self.path)
            seen = (st.st_mtime, st.st_size)
        except FileNotFoundError:
            seen = (0.0, -1)
        if seen != self._seen:
            self._by_hash = {k["sha256"]: k for k in self._read()}
            self._seen = seen

    def active(self) -> bool:
        """True when at least one key exists (then the API asks for one)."""
        with self._lock:
            self._refresh()
            return bool(self._by_hash)

    def lookup(self, key: str | None) -> str | None:
        """The name of the live key ``key``, None when it is none (compared in constant time by hash)."""
        if not key or len(key) > 200:
            return None
        h = key_hash(key)
        with self._lock:
            self._refresh()
            for stored, rec in self._by_hash.items():
                if hmac.compare_digest(stored, h):
                    return rec.get("name")
        return None
