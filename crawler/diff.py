"""Crawl diff: what a refresh changed, per document and per source (SPEC §2: refreshes by conditional GET).

A document is identified across refreshes by its URL (its ``doc_id`` is the sha256 of its raw body, so it
changes with the page). Compared with the previous ``documents`` table, each URL of this refresh is:

- ``new``: not in the previous table;
- ``changed``: in it, with a different content hash (sha256 of the extracted text: a page whose raw bytes
  changed but whose text did not, e.g. a visit counter, is unchanged);
- ``unchanged``: same content hash;
- ``gone``: in the previous table and answered 404 or 410 this refresh (removed from ``documents``);
- ``kept``: in the previous table, not confirmed this refresh (its source failed, or its fetch or extraction
  failed for another reason): carried over as it was, ``last_seen`` not advanced;
- ``dropped``: in the previous table, its source no longer in the registry (removed from ``documents``).

Every kept document row carries ``first_seen`` (first fetch), ``last_seen`` (latest successful fetch or
304) and ``last_changed`` (the fetch at which its content hash last changed), UTC timestamps.
"""
from __future__ import annotations

import hashlib
from collections.abc import Iterable

import pandas as pd

STATUSES = ("new", "changed", "unchanged", "gone", "kept", "dropped")
LIFECYCLE = ("first_seen", "last_seen", "last_changed", "content_sha256")
DIFF_COLUMNS = ("url", "source_id", "status", "doc_id", "previous_doc_id", "content_sha256", "http_status")
GONE_STATUS = (404, 410)


def content_sha256(text: str | None) -> str:
    """sha256 (hex) of a document's extracted text (UTF-8; missing text hashes as ""), the diff's content hash."""
    return hashlib.sha256((text if isinstance(text, str) else "").encode("utf-8")).hexdigest()


def _old_hash(old: dict) -> str:
    h = old.get("content_sha256")
    return h if isinstance(h, str) and h else content_sha256(old.get("text"))


def _ts(value) -> pd.Timestamp:
    ts = pd.Timestamp(value)
    return ts.tz_localize("UTC") if ts.tzinfo is None else ts.tz_convert("UTC")


def crawl_diff(previous: pd.DataFrame | None, current: pd.DataFrame, gone: dict[str, int],
               registry_sources: Iterable[str]) -> tuple[pd.DataFrame, pd.DataFrame]:
    """Diff this refresh's extracted documents against the previous ``documents`` table.

    Args:
        previous: the previous ``documents`` table (None or empty on a first crawl); its lifecycle columns
            may be absent (a table written before they existed: first_seen then falls back to fetched_at).
        current: documents extracted this refresh (``documents`` columns; ``url`` and ``fetched_at`` set).
        gone: URL -> HTTP status (404/410) of the URLs that answered gone this refresh.
        registry_sources: source ids in the registry now (previous documents of other sources are dropped).

    Returns:
        ``(documents, diff)``: the new ``documents`` rows (current rows plus kept ones, with the columns of
        :data:`LIFECYCLE`, sorted by source_id then url) and the diff table (:data:`DIFF_COLUMNS`, one row per
        URL of either table, sorted by source_id, status, url).
    """
    registry_sources = set(registry_sources)
    prev = previous if previous is not None and len(previous) else None
    prev_by_url = {} if prev is None else {r["url"]: r for r in prev.to_dict("records")}
    rows, diff = [], []
    for r in current.to_dict("records"):
        old = prev_by_url.pop(r["url"], None)
        row, status = _seen_row(r, old)
        rows.append(row)
        diff.append((r["url"], r["source_id"], status, r["doc_id"], None if old is None else old["doc_id"],
                     row["content_sha256"], None))
    for url, old in prev_by_url.items():
        src = old["source_id"]
        status = "gone" if url in gone else "dropped" if src not in registry_sources else "kept"
        if status == "kept":
            rows.append(_kept_row(old))
        diff.append((url, src, status, None, old["doc_id"], _old_hash(old), gone.get(url)))
    columns = list(current.columns) + [c for c in LIFECYCLE if c not in current.columns]
    documents = pd.DataFrame(rows, columns=columns)
    if len(documents):
        documents = documents.sort_values(["source_id", "url"], kind="stable").reset_index(drop=True)
    return documents, _diff_frame(diff)


def _seen_row(r: dict, old: dict | None) -> tuple[dict, str]:
    """A document extracted this refresh with its lifecycle columns, and its status against its previous row
    ``old`` (None: ``new``): ``unchanged`` keeps ``last_changed``, ``changed`` sets it to this fetch."""
    seen = _ts(r["fetched_at"])
    h = content_sha256(r["text"])
    if old is None:
        status, first, changed_at = "new", seen, seen
    else:
        status = "unchanged" if _old_hash(old) == h else "changed"
        first = _ts(old.get("first_seen") if pd.notna(old.get("first_seen")) else old["fetched_at"])
        old_changed = old.get("last_changed") if pd.notna(old.get("last_changed")) else first
        changed_at = _ts(old_changed) if status == "unchanged" else seen
    return {**r, "first_seen": min(first, seen), "last_seen": seen, "last_changed": changed_at,
            "content_sha256": h}, status


def _kept_row(old: dict) -> dict:
    """A previous document carried over unconfirmed: its lifecycle as recorded (fetched_at where a column is
    missing), ``last_seen`` not advanced."""
    first = old.get("first_seen") if pd.notna(old.get("first_seen")) else old["fetched_at"]
    last = old.get("last_seen") if pd.notna(old.get("last_seen")) else old["fetched_at"]
    changed = old.get("last_changed") if pd.notna(old.get("last_changed")) else first
    return {**old, "first_seen": _ts(first), "last_seen": _ts(last), "last_changed": _ts(changed),
            "content_sha256": _old_hash(old)}


def _diff_frame(diff: list[tuple]) -> pd.DataFrame:
    """The diff rows as a table of :data:`DIFF_COLUMNS`, sorted by source_id, status (in :data:`STATUSES`
    order), url."""
    order = {s: i for i, s in enumerate(STATUSES)}
    diff_df = pd.DataFrame(diff, columns=list(DIFF_COLUMNS))
    diff_df["http_status"] = diff_df["http_status"].astype("Int64")
    if len(diff_df):
        diff_df = diff_df.assign(_o=diff_df["status"].map(order)).sort_values(
            ["source_id", "_o", "url"], kind="stable").drop(columns="_o").reset_index(drop=True)
    return diff_df


def diff_counts(diff: pd.DataFrame) -> dict[str, dict[str, int]]:
    """Per source id: ``{status: count}`` for every status of :data:`STATUSES` (zeros included), plus an
    ``"all"`` entry summing every source."""
    out: dict[str, dict[str, int]] = {}
    for (src, status), n in diff.groupby(["source_id", "status"]).size().items():
        out.setdefault(src, {s: 0 for s in STATUSES})[status] = int(n)
    total = {s: sum(c[s] for c in out.values()) for s in STATUSES}
    return {**dict(sorted(out.items())), "all": total}
