"""Search scoped by jurisdiction (行政区划), document level, issuer, date and validity (SPEC §7, search filters).

A :class:`Scope` says which documents a search may return; :func:`allowed_docs` turns it into the set of doc ids
over a version's policy records (:class:`policy.record.PolicyRecord`, or their dicts), so that the search restricts
its candidates *inside* the ranking (over-fetch / doc mask), not only after top-k.

Places: a scope to 青岛市 accepts documents of 青岛市, of its parents (山东省) and national ones (全国, ``000000``);
documents of a place *below* an asked place (青岛市市北区 under 山东省) are accepted too, since they apply there.
Documents whose jurisdiction is unknown pass a place filter only when ``keep_unknown_place`` is set.

Pure library: no prefect, no I/O beyond :mod:`corpus.divisions`' bundled division table.
"""
from __future__ import annotations

import threading
from collections import OrderedDict
from dataclasses import dataclass, field
from datetime import date
from typing import Iterable, Mapping

from corpus import divisions as D
from policy.record import DOC_LEVELS

MAX_FIELD_CHARS = 200
FILTER_FIELDS = ("region", "level", "issuer", "from", "to", "in_force")


@dataclass(frozen=True)
class Scope:
    """Which documents a search may return; an empty field does not restrict.

    Fields:
        asked: the division codes named (by the question or the ``region`` filter), in order.
        places: ``asked`` with every parent up to ``000000`` (青岛市 -> 青岛市, 山东省, 全国).
        levels: accepted document levels (:data:`policy.record.DOC_LEVELS`).
        issuers: accepted issuer substrings (a record's issuer must contain one).
        date_from, date_to: inclusive range on a record's published (else effective, else written) date;
            a record with no date passes.
        in_force: only records whose validity is known ``有效``.
        inferred: whether the places came from the question text (shown, so the reader can correct it).
    """

    asked: tuple[str, ...] = ()
    places: frozenset[str] = field(default_factory=frozenset)
    levels: frozenset[str] = field(default_factory=frozenset)
    issuers: tuple[str, ...] = ()
    date_from: date | None = None
    date_to: date | None = None
    in_force: bool = False
    inferred: bool = False

    @property
    def empty(self) -> bool:
        """True when the scope restricts nothing."""
        return not (self.places or self.levels or self.issuers or self.date_from or self.date_to or self.in_force)

    def label(self, divisions: Mapping[str, D.Division] | None = None) -> str:
        """The scope shown to a reader: ``范围：浙江省 + 国家`` (places), then levels / issuers / dates / 现行有效."""
        divs = divisions or D.load_divisions()
        parts = []
        if self.asked:
            names = [divs[c].name for c in self.asked if c != D.NATIONAL]
            parts.append(" + ".join(names + ["国家"]))
        if self.levels:
            parts.append("/".join(sorted(self.levels)))
        if self.issuers:
            parts.append("发文机关含" + "/".join(self.issuers))
        if self.date_from or self.date_to:
            parts.append(f"{self.date_from or ''}~{self.date_to or ''}")
        if self.in_force:
            parts.append("现行有效")
        return "范围：" + ("；".join(parts) if parts else "不限")

    def to_dict(self) -> dict:
        """JSON-ready dict: asked codes, levels, issuers, from/to (ISO), in_force, inferred."""
        return {"region": list(self.asked), "level": sorted(self.levels), "issuer": list(self.issuers),
                "from": self.date_from.isoformat() if self.date_from else None,
                "to": self.date_to.isoformat() if self.date_to else None,
                "in_force": self.in_force, "inferred": self.inferred}


def _with_parents(codes: Iterable[str], divisions: Mapping[str, D.Division]) -> frozenset[str]:
    out: set[str] = set()
    for code in codes:
        out.add(code)
        out.update(D.ancestors(code, dict(divisions)))
    return frozenset(out)


def scope_from_question(question: str, divisions: Mapping[str, D.Division] | None = None,
                        base: Scope | None = None) -> Scope:
    """The scope a question names: the places :func:`corpus.divisions.find_places` finds in it (with their
    parents), merged into ``base`` (the explicit filters, whose places win when given).

    Args:
        question: the question text (chars).
        divisions: the division table (default: :func:`corpus.divisions.load_divisions`).
        base: explicit filters from :func:`parse_filters`; its other fields are kept.
    Returns:
        ``base`` unchanged when it already names places or the question names none; else a scope with
        ``inferred=True``.
    """
    base = base or Scope()
    if base.places:
        return base
    divs = divisions or D.load_divisions()
    asked = tuple(dict.fromkeys(p.code for p in D.find_places(question or "") if p.code in divs))
    if not asked:
        return base
    return Scope(asked=asked, places=_with_parents(asked, divs), levels=base.levels, issuers=base.issuers,
                 date_from=base.date_from, date_to=base.date_to, in_force=base.in_force, inferred=True)


def _text(name: str, value) -> str:
    if not isinstance(value, str):
        raise ValueError(f"{name}: expected a string, got {type(value).__name__}")
    value = value.strip()
    if len(value) > MAX_FIELD_CHARS:
        raise ValueError(f"{name}: longer than {MAX_FIELD_CHARS} chars")
    return value


def _items(name: str, value) -> list[str]:
    if value is None or value == "":
        return []
    if isinstance(value, str):
        if len(value) > MAX_FIELD_CHARS * 8:
            raise ValueError(f"{name}: longer than {MAX_FIELD_CHARS * 8} chars")
        raw = value.replace("，", ",").split(",")
    else:
        raw = list(value) if isinstance(value, (list, tuple)) else [value]
    if len(raw) > 32:
        raise ValueError(f"{name}: more than 32 values")
    return [v for v in (_text(name, x) for x in raw) if v]


def _place_code(value: str, divisions: Mapping[str, D.Division]) -> str:
    if value in ("全国", "国家", "中央", D.NATIONAL):
        return D.NATIONAL
    if value in divisions:
        return value
    found = D.find_places(value)
    if len(found) == 1 and found[0].end - found[0].start == len(value) and found[0].code in divisions:
        return found[0].code
    raise ValueError(f"region: unknown place {value[:40]!r}")


def _date(name: str, value) -> date | None:
    if value is None or value == "":
        return None
    if isinstance(value, date):
        return value
    text = _text(name, value)
    try:
        return date.fromisoformat(text if len(text) != 4 else f"{text}-{'01-01' if name == 'from' else '12-31'}")
    except ValueError:
        raise ValueError(f"{name}: not a date (YYYY or YYYY-MM-DD): {text[:40]!r}") from None


def _flag(name: str, value) -> bool:
    if value in (None, "", False, 0, "0", "false", "no"):
        return False
    if value in (True, 1, "1", "true", "yes", "on"):
        return True
    raise ValueError(f"{name}: expected true/false")


def parse_filters(filters: Mapping | None, divisions: Mapping[str, D.Division] | None = None) -> Scope:
    """A :class:`Scope` from request / question-file fields (:data:`FILTER_FIELDS`: ``region``, ``level``,
    ``issuer``, ``from``, ``to``, ``in_force``); other keys are ignored.

    ``region`` / ``level`` / ``issuer`` take a string (comma-separated) or a list; ``from`` / ``to`` an ISO date
    or a year; ``in_force`` a boolean-like value.

    Raises:
        ValueError: naming the field: not a mapping, a value longer than :data:`MAX_FIELD_CHARS` chars, an
            unknown place or level, a bad date, ``from`` after ``to``.
    """
    if filters is None:
        return Scope()
    if not isinstance(filters, Mapping):
        raise ValueError("filters: expected an object")
    divs = divisions or D.load_divisions()
    asked = tuple(dict.fromkeys(_place_code(v, divs) for v in _items("region", filters.get("region"))))
    levels = frozenset(_items("level", filters.get("level")))
    bad = levels - set(DOC_LEVELS)
    if bad:
        raise ValueError(f"level: unknown {sorted(bad)[0][:40]!r} (one of {'/'.join(DOC_LEVELS)})")
    lo, hi = _date("from", filters.get("from")), _date("to", filters.get("to"))
    if lo and hi and lo > hi:
        raise ValueError("from: after to")
    return Scope(asked=asked, places=_with_parents(asked, divs), levels=levels,
                 issuers=tuple(_items("issuer", filters.get("issuer"))), date_from=lo, date_to=hi,
                 in_force=_flag("in_force", filters.get("in_force")))


def _get(record, key: str):
    return record.get(key) if isinstance(record, Mapping) else getattr(record, key, None)


def _place_ok(scope: Scope, code, divisions: Mapping[str, D.Division], keep_unknown: bool) -> bool:
    if not code or code not in divisions:
        return keep_unknown
    if code in scope.places:
        return True
    return any(a in scope.asked for a in D.ancestors(code, dict(divisions)))


def _as_date(value) -> date | None:
    if value is None or isinstance(value, date):
        return value
    try:
        return date.fromisoformat(str(value)[:10])
    except ValueError:
        return None


def _date_ok(scope: Scope, record) -> bool:
    if not (scope.date_from or scope.date_to):
        return True
    day = next((d for d in (_as_date(_get(record, k)) for k in ("published_date", "effective_date",
                                                                "written_date")) if d), None)
    if day is None:
        return True
    return (scope.date_from is None or day >= scope.date_from) and (scope.date_to is None or day <= scope.date_to)


def record_in_scope(scope: Scope, record, divisions: Mapping[str, D.Division] | None = None,
                    keep_unknown_place: bool = False) -> bool:
    """Whether one policy record (a :class:`policy.record.PolicyRecord` or its dict) passes ``scope``."""
    divs = divisions or D.load_divisions()
    if scope.places and not _place_ok(scope, _get(record, "jurisdiction_code"), divs, keep_unknown_place):
        return False
    if scope.levels and _get(record, "level") not in scope.levels:
        return False
    if scope.issuers and not any(i in (_get(record, "issuer") or "") for i in scope.issuers):
        return False
    if scope.in_force and _get(record, "validity") != "有效":
        return False
    return _date_ok(scope, record)


def allowed_docs(scope: Scope, records: Iterable, divisions: Mapping[str, D.Division] | None = None,
                 keep_unknown_place: bool = False) -> set[str] | None:
    """The doc ids of ``records`` that pass ``scope``; None when the scope restricts nothing (search all).

    Args:
        records: policy records (objects or dicts with ``doc_id`` and the :class:`PolicyRecord` fields).
        keep_unknown_place: let records without a known jurisdiction pass a place filter.
    """
    if scope.empty:
        return None
    divs = divisions or D.load_divisions()
    places: dict = {}  # the place test once per distinct jurisdiction code (a corpus has few), not per record
    rest = Scope(levels=scope.levels, issuers=scope.issuers, date_from=scope.date_from, date_to=scope.date_to,
                 in_force=scope.in_force)
    out = set()
    for r in records:
        code = _get(r, "jurisdiction_code")
        if scope.places:
            if code not in places:
                places[code] = _place_ok(scope, code, divs, keep_unknown_place)
            if not places[code]:
                continue
        if rest.empty or record_in_scope(rest, r, divs):
            out.add(str(_get(r, "doc_id")))
    return out


class AllowedCache:
    """:func:`allowed_docs` over one fixed set of records (an index version's policy records), memoised per
    scope: a bounded least-recently-used map keyed by the scope's own identity (:class:`Scope` is frozen and
    hashable) and ``keep_unknown_place``. Held by the object that holds the records (the loaded
    ``policy_records`` part, :class:`retrieval.policy_records.PolicyRecords`), so it lives and dies with the
    version; thread-safe. A cached set is a ``frozenset``: no caller can change what the next one gets.

    Args:
        records: the records (objects or dicts, as :func:`allowed_docs` takes them); read once, kept.
        divisions: the division table (default: :func:`corpus.divisions.load_divisions`, read on first use).
        maxsize: scopes kept (the least recently used one is dropped beyond it).
    """

    def __init__(self, records: Iterable, divisions: Mapping[str, D.Division] | None = None, maxsize: int = 64):
        self.records = tuple(records)
        self.divisions = divisions
        self.maxsize = max(1, int(maxsize))
        self.hits = self.misses = 0
        self._sets: OrderedDict = OrderedDict()
        self._lock = threading.Lock()

    def allowed(self, scope: Scope, keep_unknown_place: bool = False) -> frozenset[str] | None:
        """The doc ids that pass ``scope`` (what :func:`allowed_docs` gives, as a frozenset); None when the
        scope restricts nothing."""
        if scope.empty:
            return None
        key = (scope, bool(keep_unknown_place))
        with self._lock:
            if key in self._sets:
                self._sets.move_to_end(key)
                self.hits += 1
                return self._sets[key]
        if self.divisions is None:
            self.divisions = D.load_divisions()
        got = frozenset(allowed_docs(scope, self.records, self.divisions, keep_unknown_place))
        with self._lock:
            self.misses += 1
            self._sets[key] = got
            self._sets.move_to_end(key)
            while len(self._sets) > self.maxsize:
                self._sets.popitem(last=False)
        return got

    def __len__(self) -> int:
        """The scopes held now."""
        return len(self._sets)
