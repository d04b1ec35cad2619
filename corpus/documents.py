"""The clean stage over a whole ``documents`` table: rules, rejects, duplicates (SPEC §3)."""
from __future__ import annotations

from collections import Counter

import pandas as pd

from corpus.clean import CleanConfig, cjk_ratio, clean_text
from corpus.dedup import find_duplicates

REJECT_COLUMNS = ("doc_id", "reason", "detail")


def clean_corpus(docs: pd.DataFrame, cfg: CleanConfig = CleanConfig()
                 ) -> tuple[pd.DataFrame, pd.DataFrame, dict]:
    """Clean every document, reject empty / non-Chinese ones, then drop duplicates.

    Args:
        docs: a ``documents`` table (needs doc_id, pubtime, text; other columns are kept).
        cfg: thresholds.

    Returns:
        ``(documents_clean, rejects, stats)``: ``documents_clean`` has the input columns with
        cleaned ``text`` plus ``n_chars`` and ``rules_applied`` (list of rule names);
        ``rejects`` has doc_id, reason (``empty``, ``too_short``, ``non_chinese``,
        ``exact_duplicate``, ``near_duplicate``) and detail; ``stats`` counts documents in/out,
        rejects by reason and matches per rule.
    """
    out, rejects, rule_counts, chars_in = clean_group(docs, cfg)
    for d in find_duplicates(out, near_threshold=cfg.near_dup_threshold, shingle=cfg.shingle,
                             num_perm=cfg.num_perm):
        rejects.append((d.doc_id, f"{d.kind}_duplicate", f"duplicate of {d.kept_id}"))
    rejected = {r[0] for r in rejects}
    out = out[~out["doc_id"].isin(rejected)].reset_index(drop=True)
    rej = pd.DataFrame(rejects, columns=list(REJECT_COLUMNS))
    stats = clean_stats(len(docs), len(out), rej["reason"], rule_counts, chars_in, int(out["n_chars"].sum()))
    return out, rej, stats


def clean_group(docs: pd.DataFrame, cfg: CleanConfig = CleanConfig()
                ) -> tuple[pd.DataFrame, list[tuple[str, str, str]], Counter, int]:
    """Clean one group of documents and apply the per-document rejects (no duplicate detection).

    Returns:
        ``(kept, rejects, rule_counts, chars_in)``: the documents that pass, with cleaned ``text``,
        ``n_chars`` and ``rules_applied``; rejects as (doc_id, reason, detail) in input order; matches per
        rule; raw chars read.
    """
    rule_counts: Counter = Counter()
    texts, applied, rejects = [], [], []
    for doc_id, raw in zip(docs["doc_id"].tolist(), docs["text"].tolist()):
        text, counts = clean_text(raw or "")
        rule_counts.update(counts)
        texts.append(text)
        applied.append(sorted(counts))
        if not text:
            rejects.append((doc_id, "empty", "no text left after cleaning"))
        elif len(text) < cfg.min_chars:
            rejects.append((doc_id, "too_short", f"{len(text)} chars < {cfg.min_chars}"))
        elif (r := cjk_ratio(text)) < cfg.min_cjk_ratio:
            rejects.append((doc_id, "non_chinese", f"CJK share {r:.2f} < {cfg.min_cjk_ratio}"))
    out = docs.copy()
    out["text"] = texts
    out["n_chars"] = [len(t) for t in texts]
    out["rules_applied"] = applied
    rejected = {r[0] for r in rejects}
    out = out[~out["doc_id"].isin(rejected)].reset_index(drop=True)
    return out, rejects, rule_counts, int(docs["text"].fillna("").str.len().sum())


def clean_stats(n_in: int, n_out: int, reasons, rule_counts: Counter, chars_in: int, chars_out: int) -> dict:
    """The clean stage's stats: documents in/out, rejects by reason (in order of first reject), matches per
    rule, chars in/out."""
    return {
        "documents_in": int(n_in),
        "documents_out": int(n_out),
        "rejects_by_reason": dict(Counter(reasons)),
        "rule_matches": dict(rule_counts),
        "chars_in": int(chars_in),
        "chars_out": int(chars_out),
    }
