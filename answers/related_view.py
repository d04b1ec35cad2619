"""Related policies where users meet them (SPEC §12): the serving index version's ``related`` part (LTM-B,
:func:`docmatch.load`) behind the answer page and its JSON API (:mod:`answers.web`).

:class:`RelatedViews` loads a version's :class:`docmatch.serve.RelatedIndex` once and keeps it by the version's
identity (:func:`retrieval.versions.version_key`, as :meth:`answers.answer.Answerer.backend` keeps backends: a
version rebuilt under the same name, or given a new part, has another manifest and so another key; the two latest
are kept), and so is the reason a version cannot serve related documents (no part, refused at publication,
changed since), so a request never reloads a version that failed. Every message it returns is free of absolute
paths (:func:`no_paths`); the detail goes to the log.
"""
from __future__ import annotations

import html
import logging
import os
import re
import threading
import unicodedata
from collections import OrderedDict
from pathlib import Path

from crawler.csv_import import http_url
from crawler.textsafe import strip_controls

log = logging.getLogger(__name__)

COLUMNS = ("doc_id", "external_id")
_ABS_PATH = re.compile(r"(?<![\w.:/])/(?:[^\s'\"/]+/)+(?=[^\s'\"/]*)")


class RelatedInputError(ValueError):
    """A request the API refuses as given (bad ``k``, an id that is too long, holds control characters or is
    not in the version): HTTP 400, the message names the problem."""


class RelatedMissingError(LookupError):
    """The version cannot serve related documents (no ``related`` part, refused or skipped at publication, its
    file changed since): HTTP 404, the message says why (the part's record in the manifest)."""


def no_paths(text: str) -> str:
    """``text`` with every absolute POSIX path cut to its last component (``/srv/data/index/v1/x.json`` ->
    ``x.json``): what a client sees of an error names no folder of the server."""
    return _ABS_PATH.sub("", str(text))


def check_id(value, column: str = "doc_id", max_chars: int = 256) -> str:
    """``value`` stripped, as a document id to look up.

    Raises:
        RelatedInputError: empty, over ``max_chars`` characters, or holding control/format characters.
    """
    if column not in COLUMNS:
        raise RelatedInputError(f"the id column must be one of {', '.join(COLUMNS)}")
    v = value.strip() if isinstance(value, str) else ""
    if not v:
        raise RelatedInputError(f"give a {column}")
    if len(v) > max_chars:
        raise RelatedInputError(f"{column} is over {max_chars} characters ({len(v)})")
    if any(unicodedata.category(c) in ("Cc", "Cf", "Cs") for c in v):
        raise RelatedInputError(f"{column} holds control characters")
    return v


def check_k(text, max_k: int) -> int:
    """``k`` from a query value: an integer in 1..``max_k``.

    Raises:
        RelatedInputError: not an integer, or out of range.
    """
    try:
        k = int(str(text).strip()[:20])
    except ValueError:
        raise RelatedInputError(f"k must be an integer, got {str(text)[:20]!r}") from None
    if not 1 <= k <= max_k:
        raise RelatedInputError(f"k must be in 1..{max_k}, got {k}")
    return k


class _Loaded:
    """A version's related model (``index``) and its documents' links (``urls``: doc_id -> http(s) URL)."""

    def __init__(self, version: str, index, urls: dict):
        self.version, self.index, self.urls = version, index, urls


def _load(vdir: Path, version: str) -> _Loaded:
    """The related model of the version in ``vdir`` and its documents' http(s) links (texts part).

    Raises: what :func:`docmatch.load` raises (PartError, FileNotFoundError, ValueError)."""
    import json

    from docmatch import load
    from retrieval.parts import TEXTS, read_texts

    index = load(vdir)
    manifest = json.loads((vdir / "manifest.json").read_text(encoding="utf-8"))
    urls = {}
    if isinstance((manifest.get("parts") or {}).get(TEXTS), dict):
        t = read_texts(vdir, manifest)
        if "url" in t.columns:
            links = ((d, http_url(u)) for d, u in zip(t["doc_id"], t["url"]))
            urls = {d: u for d, u in links if u}
    return _Loaded(version, index, urls)


class RelatedViews:
    """Related documents of a data dir's index versions for the page and the API.

    ``lookup(id, column, k, version=None)`` -> ``{doc_id, title, external_id, version, related: [{doc_id, title,
    score, external_id?, url?}]}`` (best first; ``url`` only when it is an absolute http(s) address, ``score``
    the LTM-B match probability); ``max_k`` bounds ``k``, ``max_id_chars`` an id, ``keep`` the versions held.
    """

    def __init__(self, data_dir: str | os.PathLike, max_k: int = 50, max_id_chars: int = 256, keep: int = 2):
        self.root = Path(data_dir) / "index"
        self.max_k, self.max_id_chars, self.keep = max_k, max_id_chars, keep
        self._loaded: OrderedDict = OrderedDict()
        self._lock = threading.Lock()

    def loaded(self, version: str | None = None) -> _Loaded:
        """The related model of ``version`` (default: the serving one, ``index/CURRENT`` read once), loaded
        once per version identity.

        Raises:
            RelatedMissingError: the version has no servable related part (why, without paths).
            retrieval.bundle.IndexMissingError: no index published, or ``version`` is not on disk.
        """
        from retrieval.bundle import resolve_version

        version, key = resolve_version(self.root, version)
        with self._lock:
            if key not in self._loaded:
                self._loaded[key] = self._try_load(version)
                while len(self._loaded) > self.keep:
                    self._loaded.popitem(last=False)
            got = self._loaded[key]
        if isinstance(got, str):
            raise RelatedMissingError(got)
        return got

    def warm(self) -> bool:
        """Load the serving version's related model now (a serving process's start, beside its first
        requests); False when it has none or no index is published (the reason is logged)."""
        from retrieval.bundle import IndexMissingError

        try:
            self.loaded()
            return True
        except (RelatedMissingError, IndexMissingError) as exc:
            log.info("no related policies to warm: %s", exc)
            return False

    def _try_load(self, version: str):
        """The loaded model, or the reason (str, no paths) it cannot be served; the detail is logged."""
        try:
            return _load(self.root / version, version)
        except (OSError, ValueError, KeyError, TypeError) as exc:  # a malformed model file as well
            log.warning("index %s serves no related documents: %s", version, exc)
            why = no_paths(exc)
            if "related" not in why:
                why = f"index {version} has no usable related part: {why}"
            return why

    def lookup(self, key, column: str = "doc_id", k=10, version: str | None = None) -> dict:
        """The ``k`` documents of the version most related to the one whose ``column`` is ``key``.

        Raises:
            RelatedInputError: bad ``k`` or id, or no such document in the version (HTTP 400).
            RelatedMissingError: the version has no related part (HTTP 404).
        """
        k = check_k(k, self.max_k)
        key = check_id(key, column, self.max_id_chars)
        got = self.loaded(version)
        try:
            doc = got.index.resolve(key, column)
        except KeyError:
            raise RelatedInputError(f"no document with {column} {key[:40]!r} in index {got.version}") from None
        return {"doc_id": doc, "title": _title(got.index.title.get(doc)), "external_id": got.index.external.get(doc),
                "version": got.version, "related": [_item(h, got.urls) for h in got.index.related(doc, k)]}


def _title(t) -> str | None:
    return strip_controls(t, one_line=True) if isinstance(t, str) else None


def _item(hit: dict, urls: dict) -> dict:
    """One related document for a client: title on one line, ``external_id`` and ``url`` only when known."""
    out = {"doc_id": hit["doc_id"], "title": _title(hit.get("title")), "score": float(hit["score"])}
    if hit.get("external_id") is not None:
        out["external_id"] = hit["external_id"]
    if urls.get(hit["doc_id"]):
        out["url"] = urls[hit["doc_id"]]
    return out


def render_related(items: list[dict], top: int = 5) -> str:
    """HTML of a related-policies list (the first ``top`` of ``items``): each title escaped, a link only for an
    http(s) ``url`` (:func:`crawler.csv_import.http_url` again: the page never trusts its input), its score."""
    if not items:
        return ""
    rows = []
    for it in items[:top]:
        title = html.escape(it.get("title") or it["doc_id"])
        url = http_url(it.get("url"))
        name = (f'<a class="rel" href="{html.escape(url, quote=True)}" rel="noopener noreferrer">{title}</a>' if url
                else f'<span class="rel">{title}</span>')
        rows.append(f'<li>{name} <span class="score">({float(it["score"]):.2f})</span></li>')
    return ('<div class="related"><p>相关政策 (related policies)</p><ol class="related">'
            + "".join(rows) + "</ol></div>")


LINK_LABELS = {"implements": "实施", "repeals": "废止", "repealed_by": "被废止于", "cites": "依据"}


def render_links(links: list[dict], top: int = 10) -> str:
    """HTML of a document's typed links (the first ``top``; :func:`retrieval.scoped.policy_links`: implements
    / repeals / repealed_by / cites, each ``{"type", "title", "doc_id", "url"}``): its type's label, the title
    escaped, a link only for an http(s) ``url``, "（库外）" when the title is not a document of the version; ""
    without links."""
    rows = []
    for it in (links or [])[:top]:
        kind = str(it.get("type"))
        title = html.escape(strip_controls(str(it.get("title") or it.get("doc_id") or ""), one_line=True))
        url = http_url(it.get("url"))
        name = (f'<a class="link" href="{html.escape(url, quote=True)}" rel="noopener noreferrer">{title}</a>' if url
                else f'<span class="link">{title}</span>')
        outside = "" if it.get("doc_id") is not None else ' <span class="score">（库外）</span>'
        rows.append(f'<li class="link-{html.escape(kind, quote=True)}"><span class="link-type">'
                    f'{html.escape(LINK_LABELS.get(kind, kind))}</span> {name}{outside}</li>')
    if not rows:
        return ""
    return '<div class="links"><p>政策关系 (typed links)</p><ul class="links">' + "".join(rows) + "</ul></div>"
