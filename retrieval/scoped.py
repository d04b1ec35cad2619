"""Scoped search over a loaded index version (SPEC §7 search filters): the one place the command lines
(``flows.search``, ``flows.ask``) and the answer API turn a request's filter fields and question into a
:class:`retrieval.scope.Scope` and the doc ids the search may return, over the version's own policy records
(the ``policy_records`` serving part, :mod:`retrieval.policy_records`).

- Explicit filters (``region``, ``level``, ``issuer``, ``from``, ``to``, ``in_force``:
  :func:`retrieval.scope.parse_filters`) restrict strictly: a record whose jurisdiction is unknown does not pass
  a ``region`` filter.
- Unless switched off (``infer=False``), places the question names (``浙江省的数据条例``) scope it when no
  explicit ``region`` is given (:func:`retrieval.scope.scope_from_question`); such an *inferred* place lets
  documents of unknown jurisdiction pass, so none is lost to a missing record field, and is shown in the label
  so the reader can correct it.
- A version published before the part existed: filters are a :class:`ScopeError` naming the version; a scope
  only inferred from the question is dropped there (the search runs unscoped, as before).
- A scope that names a place also orders the search's hits (:func:`scope_order`,
  :class:`retrieval.scope_order.ScopeOrder`: the quoted copy, then the asked place's own documents).
"""
from __future__ import annotations

from typing import Mapping

from retrieval.policy_records import POLICY_PART, POLICY_RECORDS, PolicyRecords, hit_fields
from retrieval.scope import FILTER_FIELDS, Scope, allowed_docs, parse_filters, scope_from_question
from retrieval.scope_order import ScopeOrder


class ScopeError(ValueError):
    """Filters that cannot be applied to the serving version (it has no policy records part)."""


def filters_of(mapping: Mapping | None) -> dict:
    """The filter fields (:data:`retrieval.scope.FILTER_FIELDS`) ``mapping`` gives (a request, a question line)."""
    if not isinstance(mapping, Mapping):
        return {}
    return {f: mapping[f] for f in FILTER_FIELDS if f in mapping and mapping[f] is not None}


def request_scope(question: str | None, filters: Mapping | None = None, infer: bool = True) -> Scope:
    """The scope of one request: its explicit ``filters``, then (``infer``) the places ``question`` names when
    the filters name none.

    Raises:
        ValueError: a bad filter (:func:`retrieval.scope.parse_filters`' message names the field).
    """
    base = parse_filters(filters_of(filters) if filters is not None else None)
    return scope_from_question(question or "", base=base) if infer else base


def scope_payload(scope: Scope) -> dict:
    """The scope shown with a result: :meth:`Scope.to_dict` and its ``label`` (``范围：浙江省 + 国家``)."""
    return {**scope.to_dict(), "label": scope.label()}


def scoped_docs(bundle, scope: Scope) -> tuple[Scope, frozenset[str] | None]:
    """``(scope, docs)``: the doc ids of ``bundle``'s version that ``scope`` lets a search return (None: all),
    over its ``policy_records`` part; the scope returned is the one applied (an inferred-only scope is dropped
    on a version without the part). The set is computed once per scope and version and then reused
    (:meth:`retrieval.policy_records.PolicyRecords.allowed`: a bounded cache held by the loaded part).

    Raises:
        ScopeError: explicit filters on a version without the part. PartError: the part changed since publication.
    """
    if scope.empty:
        return scope, None
    if not bundle.has_part(POLICY_RECORDS):
        explicit = scope.levels or scope.issuers or scope.date_from or scope.date_to or scope.in_force
        if scope.inferred and not explicit:
            return Scope(), None
        raise ScopeError(f"index {bundle.version} has no {POLICY_RECORDS} part (published before scoped search): "
                         "filters need it; rebuild the index, or search without filters")
    records = bundle.load(POLICY_PART)
    if isinstance(records, PolicyRecords):
        return scope, records.allowed(scope, keep_unknown_place=scope.inferred)
    return scope, allowed_docs(scope, records.values(), keep_unknown_place=scope.inferred)


def scope_order(bundle, scope: Scope) -> ScopeOrder | None:
    """The reorder of ``scope``'s search over ``bundle``'s version (:class:`retrieval.scope_order.ScopeOrder`:
    quoted text, then the asked place's own documents first), or None when the scope names no place or the
    version has no policy records (the search's own order stands)."""
    if not scope.asked or not bundle.has_part(POLICY_RECORDS):
        return None
    records = bundle.load(POLICY_PART)

    def jurisdiction(doc_id: str) -> str | None:
        return (records.get(doc_id) or {}).get("jurisdiction_code")

    return ScopeOrder(frozenset(scope.asked), jurisdiction)


def policy_fields(bundle, doc_id: str) -> dict:
    """What a hit of ``doc_id`` carries from the version's policy record (:func:`retrieval.policy_records.hit_fields`; all
    None on a version without the part)."""
    records = bundle.load(POLICY_PART) if bundle.has_part(POLICY_RECORDS) else {}
    return hit_fields(records.get(str(doc_id)))


def policy_links(bundle, doc_id: str) -> list[dict]:
    """Typed links of ``doc_id`` in the version (:meth:`retrieval.policy_records.PolicyRecords.links_of`:
    implements / repeals / cites / repealed_by, ``{"type", "title", "doc_id"}``); [] on a version without the
    part."""
    if not bundle.has_part(POLICY_RECORDS):
        return []
    records = bundle.load(POLICY_PART)
    return records.links_of(str(doc_id)) if isinstance(records, PolicyRecords) else []
