"""The ``policy_records`` stage: ``documents_clean`` -> one policy record per document (SPEC §2 metadata), as a
sharded Parquet table with links and evidence as JSON strings. Never imports prefect."""
from __future__ import annotations

import json
import os
from collections import Counter
from datetime import date

import pyarrow as pa

from crawler.registry import DEFAULT_REGISTRY, load_registry
from policy.links import resolve_links
from policy.record import PolicyRecord, extract_record
from policy.stages import POLICY_RECORDS
from storage import manifest_fingerprint
from storage.tables import TableWriter, iter_table

POLICY_SCHEMA = pa.schema([
    ("doc_id", pa.string()), ("jurisdiction_code", pa.string()), ("jurisdiction_name", pa.string()),
    ("jurisdiction_level", pa.string()), ("level", pa.string()), ("issuer", pa.string()), ("doc_number", pa.string()),
    ("written_date", pa.date32()), ("published_date", pa.date32()), ("effective_date", pa.date32()),
    ("expiry_date", pa.date32()), ("validity", pa.string()), ("links", pa.string()), ("evidence", pa.string()),
])
FIELDS = tuple(POLICY_SCHEMA.names)
_READ = ("doc_id", "source_id", "title", "text", "pubtime", "issuer", "doc_number", "written_date", "region", "level",
         "effective_date", "validity")


def registry_owners(path: str | os.PathLike | None = DEFAULT_REGISTRY) -> dict[str, str]:
    """source_id -> the source's owner (its registry name); empty when ``path`` is None or not a registry.

    A missing or broken registry file gives no owners rather than an error: the owner is one piece of
    evidence among several.
    """
    if not path:
        return {}
    try:
        return {s.id: s.name for s in load_registry(path)}
    except (ValueError, OSError):
        return {}


def build_records(docs: list[dict], owners: dict[str, str] | None = None, columns: dict | None = None,
                  as_of: date | None = None) -> tuple[list[PolicyRecord], dict]:
    """Records of ``docs`` (``documents_clean`` rows as dicts) with links resolved over them; and counts."""
    owners = owners or {}
    recs = [extract_record(d, owners.get(d.get("source_id")), columns=columns, as_of=as_of) for d in docs]
    counts = resolve_links(recs, {str(d["doc_id"]): d.get("title") or "" for d in docs})
    return recs, counts


def records_frame_rows(recs: list[PolicyRecord]) -> dict[str, list]:
    """Column lists of the ``policy_records`` table (links and evidence as JSON strings)."""
    cols: dict[str, list] = {f: [] for f in FIELDS}
    for r in recs:
        d = r.to_dict()
        for f in FIELDS:
            v = d[f]
            cols[f].append(json.dumps(v, ensure_ascii=False, sort_keys=True) if f in ("links", "evidence") else v)
    return cols


def coverage(recs: list[PolicyRecord]) -> dict[str, float]:
    """Share of records with each field known (validity: not 未知; level: not 其他; links: at least one)."""
    n = max(1, len(recs))
    out = {}
    for f in FIELDS[1:]:
        vals = [getattr(r, f) for r in recs]
        if f == "validity":
            known = sum(v != "未知" for v in vals)
        elif f == "level":
            known = sum(v != "其他" for v in vals)
        elif f == "evidence":
            continue
        else:
            known = sum(bool(v) for v in vals)
        out[f] = round(known / n, 4)
    return out


def policy_records_stage(clean_dir, out_dir, columns: dict | None = None, registry: str | os.PathLike | None = None,
                         as_of: str | None = None) -> dict:
    """``documents_clean`` -> ``policy_records`` (one row per document, :data:`POLICY_SCHEMA`).

    ``columns``: the import's column mapping (mapped metadata columns are evidence ``column:<name>``);
    ``registry``: the source registry whose names are the sources' owners (None: no owners; the main job
    passes ``crawler/sources.yaml`` or the crawl's registry); ``as_of``: ISO day expiries are
    compared with (default today). Memory: every document's metadata and one group of texts at a time
    (links are resolved over the whole corpus).

    Returns:
        stats: rows, per-field coverage, levels, validity and jurisdiction-level counts, link counts.
    """
    day = date.fromisoformat(as_of) if as_of else date.today()
    docs: list[dict] = []
    for df in iter_table(clean_dir):
        df = df[[c for c in _READ if c in df.columns]].astype(object)
        docs += df.where(df.notna(), None).to_dict("records")
    recs, counts = build_records(docs, registry_owners(registry), columns, day)
    stats = {"rows": len(recs), "coverage": coverage(recs), "levels": dict(Counter(r.level for r in recs)),
             "validity": dict(Counter(r.validity for r in recs)),
             "jurisdiction_levels": dict(Counter(r.jurisdiction_level or "unknown" for r in recs)), "links": counts}
    with TableWriter(out_dir, name="policy_records", schema=POLICY_SCHEMA,
                     config={"columns": dict(columns or {}), "as_of": day.isoformat(),
                             "registry": str(registry) if registry else None},
                     code_version=POLICY_RECORDS.code_version(),
                     inputs={"documents_clean": manifest_fingerprint(clean_dir)}) as w:
        w.write(pa.table(records_frame_rows(recs), schema=POLICY_SCHEMA))
        w.stats = stats
    return stats
