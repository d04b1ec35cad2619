"""Links between corpus documents (repeals, implements, cites) resolved by normalised title, and the validity a
repeal gives the repealed document (SPEC §2 metadata; 《立法技术规范（试行）》 废止 clauses)."""
from __future__ import annotations

from policy.record import PolicyRecord, title_key


def resolve_links(records: list[PolicyRecord], titles: dict[str, str]) -> dict[str, int]:
    """Fill each link's ``doc_id`` from the corpus titles and mark repealed records, in place.

    ``titles``: doc_id -> title of every record. A link resolves to the documents whose :func:`title_key`
    equals the linked title's, never to the linking document itself nor to one dated after it (date: the
    record's published, else effective, else written date). A repeal of a document with the linker's own
    title is a revision: it resolves only to same-title documents dated before the linker (undated ones
    cannot be told apart from it: left unresolved), which become 已修订, not 废止. A record whose validity
    came from a column or header keeps it.

    Returns:
        counts: ``{"links", "resolved", "repealed", "revised"}``.
    """
    by_key: dict[str, list[str]] = {}
    for doc_id, title in titles.items():
        by_key.setdefault(title_key(title), []).append(doc_id)
    by_id = {r.doc_id: r for r in records}
    counts = {"links": 0, "resolved": 0, "repealed": 0, "revised": 0}
    day = {r.doc_id: r.published_date or r.effective_date or r.written_date for r in records}
    for rec in records:
        own = title_key(titles.get(rec.doc_id))
        for link in rec.links:
            counts["links"] += 1
            key = title_key(link["title"])
            targets = [d for d in by_key.get(key, []) if d != rec.doc_id and _before(day.get(d), day[rec.doc_id],
                                                                                      strict=key == own)]
            link["doc_id"] = targets[0] if targets else None
            counts["resolved"] += bool(targets)
            if link["type"] != "repeals":
                continue
            for target in targets:
                _mark(by_id[target], "已修订" if key == own else "废止", rec.doc_id, counts)
    return counts


def _mark(target: PolicyRecord, validity: str, by: str, counts: dict) -> None:
    """Set a repealed / revised record's validity unless an explicit source (column, header) gave it."""
    where = target.evidence.get("validity", "")
    if where.startswith(("column:", "header:")):
        return
    target.validity = validity
    target.evidence["validity"] = f"repealed_by:{by}" if validity == "废止" else f"revised_by:{by}"
    counts["repealed" if validity == "废止" else "revised"] += 1


def _before(target, own, strict: bool) -> bool:
    """Whether a document dated ``target`` may be linked from one dated ``own``: not after it; with ``strict``
    (a same-title revision) both dates must be known and ``target`` earlier."""
    if target is None or own is None:
        return not strict
    return target < own if strict else target <= own
