"""Self-supervised queries mined from the indexed corpus itself (never the held-out questions), one miner
for the fusion fit and for retrieval training (SPEC §7).

- :func:`mine_queries`: known-item queries for fitting the hybrid weights: each document's title and its
  lead sentence, each targeting its document; :func:`mask_leads` cuts a lead out of the chunks holding it
  (the Inverse Cloze Task of Lee et al. 2019, "Latent Retrieval for Weakly Supervised Open Domain QA").
- :func:`mine_pairs`: query <-> passage pairs for contrastive training (the FlagEmbedding / C-Pack recipe,
  Xiao et al. 2023, arXiv:2309.07597): ``title`` (title <-> opening passage), ``heading`` (a numbered heading
  <-> the text after it) and ``ict`` (a sentence <-> its context with the sentence removed).

Sentences are cut by one rule (:func:`sentences`): a run of chars up to a sentence or clause end
(``。！？；!?;``) or a line break.
"""
from __future__ import annotations

import hashlib
import re
from dataclasses import dataclass
from typing import Iterable, Protocol, Sequence

import numpy as np
import pandas as pd



class PairMiningConfig(Protocol):
    """What the pair miner reads of a config (:class:`retrieval.train.RetrievalTrainConfig` has it): the pair
    kinds, the query/passage lengths in chars, the cap on pairs and the sampling seed."""

    kinds: tuple[str, ...]
    max_query_len: int
    max_passage_len: int
    max_pairs: int
    seed: int

_SENT = re.compile(r"([^。！？；!?;\n]+)[。！？；!?;]*")
_HEADING = re.compile(r"^(?:[一二三四五六七八九十]+、|（[一二三四五六七八九十]+）|第[一二三四五六七八九十百]+[条章节])")


@dataclass(frozen=True)
class LeadConfig:
    """lead_min/lead_max: chars of a lead sentence used as a query; max_queries: queries kept (seeded sample);
    seed: the sample's seed. :class:`retrieval.fusion.FusionConfig` carries the same fields."""

    lead_min: int = 8
    lead_max: int = 60
    max_queries: int = 400
    seed: int = 13


def sentences(text: str, terminators: bool = True) -> list[str]:
    """The sentences/clauses of ``text``, stripped, empty ones dropped; with ``terminators`` each keeps its
    closing punctuation."""
    return [s for s in (m.group(0 if terminators else 1).strip() for m in _SENT.finditer(text or "")) if s]


def lead_sentence(text: str, cfg: LeadConfig = LeadConfig()) -> str | None:
    """First sentence/clause of ``text`` (without its punctuation) with at least ``lead_min`` chars, cut to
    ``lead_max``; None if none."""
    for s in sentences(text, terminators=False):
        if len(s) >= cfg.lead_min:
            return s[:cfg.lead_max]
    return None


def mine_queries(docs: pd.DataFrame, cfg: LeadConfig = LeadConfig()) -> pd.DataFrame:
    """Known-item queries from ``docs`` (doc_id, text, optional title): the title and the lead sentence of every
    document, each targeting that document. A query text shared by several documents is dropped; at most
    ``max_queries`` (seeded sample, titles and leads alike). ``cfg``: any object with the fields of
    :class:`LeadConfig` (e.g. :class:`retrieval.fusion.FusionConfig`).

    Returns columns query, doc_id, kind (``title`` | ``lead``).
    """
    return mine_queries_from([docs], cfg)


def mine_queries_from(frames: Iterable[pd.DataFrame], cfg: LeadConfig = LeadConfig()) -> pd.DataFrame:
    """:func:`mine_queries` over the documents of several frames (a table read shard by shard): the same
    queries as over their concatenation, holding only the candidate queries in memory."""
    rows = []
    for docs in frames:
        for r in docs.itertuples(index=False):
            title = getattr(r, "title", None)
            if isinstance(title, str) and title.strip():
                rows.append((title.strip(), r.doc_id, "title"))
            lead = lead_sentence(r.text, cfg)
            if lead:
                rows.append((lead, r.doc_id, "lead"))
    q = pd.DataFrame(rows, columns=["query", "doc_id", "kind"])
    q = q.drop_duplicates(["query", "doc_id"]).drop_duplicates("query", keep=False)
    if len(q) > cfg.max_queries:
        q = q.sample(cfg.max_queries, random_state=cfg.seed).sort_index()
    return q.reset_index(drop=True)


def mask_leads(texts: Sequence[str], row_doc: Sequence[str], queries: pd.DataFrame) -> dict[int, str]:
    """Rows of the chunks that contain a ``lead`` query of their own document, with that text cut out (ICT).

    Args: texts, row_doc: chunk texts and doc ids by row; queries: query, doc_id, kind.
    Returns {row: masked text} (only rows that change).
    """
    leads: dict[str, list[str]] = {}
    for r in queries.itertuples(index=False):
        if getattr(r, "kind", "lead") == "lead":
            leads.setdefault(str(r.doc_id), []).append(r.query)
    out = {}
    for row, (text, doc) in enumerate(zip(texts, row_doc)):
        new = text
        for q in leads.get(str(doc), ()):
            new = new.replace(q, "")
        if new != text:
            out[row] = new
    return out


def _doc_pairs(doc_id, text: str, title, cfg: PairMiningConfig) -> list[tuple]:
    """The (query, passage, doc_id, kind) pairs of one document (see the module doc)."""
    qmax, pmax = cfg.max_query_len - 2, cfg.max_passage_len - 2
    sents = sentences(text)
    if not sents:
        return []
    rows = []
    if "title" in cfg.kinds and isinstance(title, str) and len(title.strip()) >= 4:
        rows.append((title.strip()[:qmax], "".join(sents)[:pmax], doc_id, "title"))
    for i, s in enumerate(sents):
        if "heading" in cfg.kinds and _HEADING.match(s) and 4 <= len(s) <= qmax and i + 1 < len(sents):
            rows.append((s, "".join(sents[i + 1:])[:pmax], doc_id, "heading"))
        elif "ict" in cfg.kinds and 8 <= len(s) <= qmax and len(sents) >= 3:
            before, after = "".join(sents[max(0, i - 2):i]), "".join(sents[i + 1:i + 4])
            ctx = (before[-(pmax // 3):] + after)[:pmax]  # the sentence itself removed (ICT)
            if len(ctx) >= 16:
                rows.append((s, ctx, doc_id, "ict"))
    return rows


def mine_pairs(docs: pd.DataFrame, cfg: PairMiningConfig) -> pd.DataFrame:
    """Query <-> passage pairs mined from documents (doc_id, text, optional title); see the module doc.

    Passages are cut to ``max_passage_len - 2`` chars, queries to ``max_query_len - 2``. Returns columns
    query, passage, doc_id, kind (at most ``max_pairs``, seeded sample, then in document order).
    """
    return mine_pairs_from([docs], cfg)


def mine_pairs_from(frames: Iterable[pd.DataFrame], cfg: PairMiningConfig) -> pd.DataFrame:
    """:func:`mine_pairs` over the documents of several frames (a table read shard by shard): the same pairs as
    over their concatenation, holding one frame of documents at a time."""
    rows = []
    for docs in frames:
        for r in docs.itertuples(index=False):
            rows += _doc_pairs(r.doc_id, r.text, getattr(r, "title", None), cfg)
    pairs = pd.DataFrame(rows, columns=["query", "passage", "doc_id", "kind"]).drop_duplicates(["query", "passage"])
    if len(pairs) > cfg.max_pairs:
        keep = np.sort(np.random.default_rng(cfg.seed).choice(len(pairs), cfg.max_pairs, replace=False))
        pairs = pairs.iloc[keep]
    return pairs.reset_index(drop=True)


def split_by_doc(pairs: pd.DataFrame, dev_fraction: float, seed: int) -> tuple[pd.DataFrame, pd.DataFrame]:
    """(train, dev): a document's pairs all go to one side, by a seeded hash of its id."""
    def is_dev(d: str) -> bool:
        return int(hashlib.sha256(f"{seed}:{d}".encode()).hexdigest()[:8], 16) / 2**32 < dev_fraction

    dev = pairs["doc_id"].map(is_dev)
    return pairs[~dev].reset_index(drop=True), pairs[dev].reset_index(drop=True)
