"""Decoding of fetched HTML bytes to text (SPEC §2: GB2312/GBK pages without a correct header)."""
from __future__ import annotations

import re

_META_CHARSET = re.compile(rb"""<meta[^>]+charset\s*=\s*["']?\s*([A-Za-z0-9_\-]+)""", re.I)
_ALIASES = {"gb2312": "gb18030", "gbk": "gb18030", "x-gbk": "gb18030", "gb_2312-80": "gb18030", "utf8": "utf-8"}
_SINGLE_BYTE = {"iso-8859-1", "latin-1", "latin1", "windows-1252", "cp1252", "ascii", "us-ascii"}


def _norm(enc: str | None) -> str | None:
    if not enc:
        return None
    e = enc.strip().strip("\"'").lower()
    return _ALIASES.get(e, e)


def decode_html(body: bytes, content_type: str | None) -> tuple[str, str]:
    """Decode HTML bytes: the header charset, then the ``<meta>`` charset, then charset-normalizer's
    guess; the first that decodes strictly wins, except that a single-byte charset (a wrong header
    on a GBK page) loses to a detected CJK encoding. GB2312/GBK decode as GB18030 (their superset).

    Returns ``(text, encoding)``.
    """
    from charset_normalizer import from_bytes

    header = None
    if content_type and "charset=" in content_type.lower():
        header = _norm(content_type.lower().split("charset=")[-1].split(";")[0])
    m = _META_CHARSET.search(body[:4096])
    meta = _norm(m.group(1).decode("ascii", "ignore")) if m else None
    best = from_bytes(body[:200_000]).best()
    detected = _norm(best.encoding) if best else None
    candidates = [c for c in (header, meta, detected, "utf-8", "gb18030") if c]
    for enc in dict.fromkeys(candidates):
        if enc in _SINGLE_BYTE and (meta not in (None, enc) or (detected and detected not in _SINGLE_BYTE)):
            continue
        try:
            return body.decode(enc), enc
        except (UnicodeDecodeError, LookupError):
            continue
    return body.decode("utf-8", "replace"), "utf-8"
