"""The policy records as a serving part, declared once (SPEC §7 search filters; :mod:`retrieval.serving_parts`):
each index version pins the policy record (jurisdiction, level, issuer, 文号, dates, validity) of every document
it holds, so that a scoped search (:mod:`retrieval.scope`) filters over the records of the version it searches,
never over a ``policy_records`` table that a later run replaced, and a rolled-back version serves its own.

The part (``policy-records.jsonl``, one JSON object per document, sorted by ``doc_id``) is fitted on the staged
version (:func:`records_fit`) from the data dir's ``policy_records`` table (the index stage reads it: its
fingerprint enters the stage's cache key), restricted to the version's documents; a data dir without that table
(a test-built one, an index refreshed on its own) gets records computed from ``documents_clean`` with
:func:`policy.stage.build_records` (no registry owners), so every version has the part.
"""
from __future__ import annotations

import json
import threading
from collections.abc import Mapping
from datetime import date, datetime
from pathlib import Path

from retrieval.serving_parts import ServingPart

POLICY_RECORDS = "policy_records"  # the part's name, and the data dir's table it is fitted from
POLICY_FILE = "policy-records.jsonl"
DATE_FIELDS = ("written_date", "published_date", "effective_date", "expiry_date")
# the fields a search hit carries from its document's record (flows.search, the answer API)
HIT_FIELDS = ("level", "issuer", "doc_number", *DATE_FIELDS, "validity")
# typed links between documents, in the order shown: a record's own (policy.record.LINK_TYPES), then the inverse
LINK_ORDER = ("implements", "repeals", "cites", "repealed_by")


def _iso(v) -> str | None:
    if v is None or (isinstance(v, float) and v != v):
        return None
    if isinstance(v, (date, datetime)) or hasattr(v, "isoformat"):
        try:
            return v.isoformat()[:10]
        except (ValueError, TypeError):  # pandas NaT
            return None
    return str(v)[:10] or None


def _json_field(v):
    if v is None or (isinstance(v, float) and v != v):
        return None
    if isinstance(v, str):
        try:
            return json.loads(v)
        except ValueError:
            return v
    return v


def _plain(rec: dict) -> dict:
    """A record (a table row or :meth:`policy.record.PolicyRecord.to_dict`) as JSON-ready values: ISO dates,
    links and evidence as JSON values, NaN as None."""
    out = {}
    for k, v in rec.items():
        if k in DATE_FIELDS:
            out[k] = _iso(v)
        elif k in ("links", "evidence"):
            out[k] = _json_field(v)
        elif isinstance(v, float) and v != v:
            out[k] = None
        else:
            out[k] = v
    out["doc_id"] = str(out["doc_id"])
    return out


def table_records(table_dir: str | Path, doc_ids: set[str]) -> list[dict]:
    """The rows of the ``policy_records`` table ``table_dir`` whose doc_id is in ``doc_ids``, as plain dicts."""
    from storage.tables import iter_table

    out = []
    for df in iter_table(table_dir):
        df = df[df["doc_id"].astype(str).isin(doc_ids)].astype(object)
        out += [_plain(r) for r in df.where(df.notna(), None).to_dict("records")]
    return out


def computed_records(clean_dir: str | Path, doc_ids: set[str]) -> list[dict]:
    """Records of the documents of ``doc_ids`` computed from ``documents_clean`` (:func:`policy.stage.build_records`,
    links resolved over the whole table, no registry owners, expiries compared with today)."""
    from policy.stage import _READ, build_records
    from storage.tables import iter_table

    docs: list[dict] = []
    for df in iter_table(clean_dir):
        df = df[[c for c in _READ if c in df.columns]].astype(object)
        docs += df.where(df.notna(), None).to_dict("records")
    recs, _ = build_records(docs, None, None, date.today())
    return [_plain(r.to_dict()) for r in recs if str(r.doc_id) in doc_ids]


def records_text(records: list[dict]) -> str:
    """The part's JSON Lines text: one record per line, sorted by doc_id (same records, same bytes)."""
    return "".join(json.dumps(r, ensure_ascii=False, sort_keys=True) + "\n"
                   for r in sorted(records, key=lambda r: r["doc_id"]))


def records_fit(inputs: dict):
    """The ``policy_records`` part's fit (:data:`POLICY_PART`) from the index stage's ``inputs``: the table
    ``policy_dir`` (default: ``policy_records`` beside ``clean_dir``) when it exists, else records computed
    from ``clean_dir``; restricted to the staged version's documents (its ``texts`` part)."""
    from retrieval.parts import FittedPart

    clean_dir = inputs.get("clean_dir")
    if not clean_dir:
        return None
    table = Path(inputs.get("policy_dir") or Path(clean_dir).parent / POLICY_RECORDS)

    def fit(root: Path, version: str):
        import pandas as pd

        from storage import manifest_fingerprint
        from storage.tables import MANIFEST_NAME

        doc_ids = set(pd.read_parquet(Path(root) / version / "texts.parquet", columns=["doc_id"])["doc_id"].astype(str))
        if (table / MANIFEST_NAME).is_file():
            recs, origin = table_records(table, doc_ids), {"table": manifest_fingerprint(table)}
        else:
            recs, origin = computed_records(clean_dir, doc_ids), {"computed": "documents_clean"}
        return records_text(recs), {"rows": len(recs), "documents": len(doc_ids), "source": origin}

    return FittedPart(POLICY_RECORDS, POLICY_FILE, fit)


class PolicyRecords(Mapping):
    """A version's policy records, ``{doc_id: record}`` (read only), with what serving derives from them once
    per loaded version (held here, so it lives and dies with the version's bundle, :meth:`ServingBundle.load`):

    - :meth:`allowed`: the doc ids a scope lets a search return, memoised per scope
      (:class:`retrieval.scope.AllowedCache`, ``scope_cache`` scopes kept);
    - :meth:`links_of`: a document's typed links to other documents (SPEC §2 metadata: 实施 / 废止 / 根据), its
      own and the inverse ``repealed_by`` of the documents that repeal it;
    - :attr:`levels`: the document levels the records hold, in :data:`policy.record.DOC_LEVELS` order.
    """

    def __init__(self, records: dict[str, dict], scope_cache: int = 64):
        self._records = records
        self._scope_cache = scope_cache
        self._lock = threading.Lock()
        self._allowed = None
        self._repealed_by: dict[str, list[str]] | None = None

    def __getitem__(self, doc_id: str) -> dict:
        return self._records[doc_id]

    def __iter__(self):
        return iter(self._records)

    def __len__(self) -> int:
        return len(self._records)

    @property
    def scope_cache(self):
        """The :class:`retrieval.scope.AllowedCache` over these records (made on first use)."""
        from retrieval.scope import AllowedCache

        with self._lock:
            if self._allowed is None:
                self._allowed = AllowedCache(self._records.values(), maxsize=self._scope_cache)
            return self._allowed

    def allowed(self, scope, keep_unknown_place: bool = False) -> frozenset[str] | None:
        """The doc ids that pass ``scope`` (:func:`retrieval.scope.allowed_docs`, cached per scope); None when
        the scope restricts nothing."""
        return self.scope_cache.allowed(scope, keep_unknown_place)

    @property
    def levels(self) -> tuple[str, ...]:
        """The document levels held by at least one record, in :data:`policy.record.DOC_LEVELS` order."""
        from policy.record import DOC_LEVELS

        have = {r.get("level") for r in self._records.values()}
        return tuple(lv for lv in DOC_LEVELS if lv in have)

    def links_of(self, doc_id: str) -> list[dict]:
        """Typed links of ``doc_id`` (:data:`LINK_ORDER`): ``{"type", "title", "doc_id"}``, its record's own
        (``repeals``, ``implements``, ``cites``; ``doc_id`` None when the title is not a document of the version)
        then ``repealed_by`` for every record whose resolved ``repeals`` link names it (``title`` None: the
        caller knows the titles)."""
        rec = self._records.get(str(doc_id)) or {}
        own = [{"type": str(link.get("type")), "title": link.get("title"),
                "doc_id": None if link.get("doc_id") is None else str(link.get("doc_id"))}
               for link in (rec.get("links") or []) if isinstance(link, dict) and link.get("type") in LINK_ORDER]
        with self._lock:
            if self._repealed_by is None:
                self._repealed_by = _repealers(self._records)
        by = [{"type": "repealed_by", "title": None, "doc_id": d} for d in self._repealed_by.get(str(doc_id), [])]
        return sorted(own, key=lambda x: LINK_ORDER.index(x["type"])) + by


def _repealers(records: Mapping[str, dict]) -> dict[str, list[str]]:
    """doc_id -> the doc ids whose records repeal it (a resolved ``repeals`` link), in doc_id order."""
    out: dict[str, list[str]] = {}
    for doc_id in sorted(records):
        for link in records[doc_id].get("links") or []:
            if isinstance(link, dict) and link.get("type") == "repeals" and link.get("doc_id") is not None:
                targets = out.setdefault(str(link["doc_id"]), [])
                if doc_id not in targets:
                    targets.append(doc_id)
    return out


def load_records(bundle, path: Path) -> PolicyRecords:
    """The version's policy records, ``{doc_id: record}`` (dates as ISO strings), from its checked file, as a
    :class:`PolicyRecords` (with the per-scope cache of allowed documents and the typed links).

    Raises:
        ValueError: a line that is not a JSON object with a ``doc_id``."""
    out: dict[str, dict] = {}
    with open(path, encoding="utf-8") as fh:
        for n, line in enumerate(fh, 1):
            if not line.strip():
                continue
            rec = json.loads(line)
            if not isinstance(rec, dict) or "doc_id" not in rec:
                raise ValueError(f"policy records of index {getattr(bundle, 'version', '?')}: line {n} is not a record")
            out[str(rec["doc_id"])] = rec
    return PolicyRecords(out)


def hit_fields(record: dict | None) -> dict:
    """What a search hit carries from its document's policy record: ``jurisdiction`` (code, name, level), level,
    issuer, doc_number, the dates and validity (all None without a record)."""
    r = record or {}
    return {"jurisdiction": {"code": r.get("jurisdiction_code"), "name": r.get("jurisdiction_name"),
                             "level": r.get("jurisdiction_level")},
            **{k: r.get(k) for k in HIT_FIELDS}}


POLICY_PART = ServingPart(POLICY_RECORDS, "metadata", POLICY_FILE, build="fitted",
                          fit="retrieval.policy_records:records_fit",
                          load="retrieval.policy_records:load_records")
PARTS = (POLICY_PART,)
