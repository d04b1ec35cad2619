"""Dataset report, like a data card (SPEC §5): Markdown + PNG plots under ``<data>/report/``.

Figures: documents per source (top 10), publication years, document lengths, sentence lengths,
vocabulary coverage, PolicySM pair counts per split and kind, and the shortcut probe against the
majority baseline. Plots with matplotlib (Agg backend, no display needed).
"""
from __future__ import annotations

import os
from pathlib import Path
from typing import Mapping

import pandas as pd

import numpy as np

from storage import atomic_path, read_manifest, read_table
from storage.tables import iter_table


def _axes():
    """A (fig, ax) on the Agg backend, with a CJK font when one is installed (source names are Chinese)."""
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt
    from matplotlib import font_manager

    cjk = [f.name for f in font_manager.fontManager.ttflist if any(k in f.name for k in ("CJK", "WenQuanYi", "Hei", "Song"))]
    if cjk:
        plt.rcParams["font.sans-serif"] = [cjk[0], "DejaVu Sans"]
    return plt.subplots(figsize=(7, 4))


def _save(fig, ax, title: str, xlabel: str, path: Path) -> None:
    import matplotlib.pyplot as plt

    ax.set_title(title)
    ax.set_xlabel(xlabel)
    fig.tight_layout()
    fig.savefig(path, dpi=90)
    plt.close(fig)


def _bar(series: pd.Series, title: str, path: Path, xlabel: str = "", horizontal: bool = False) -> None:
    fig, ax = _axes()
    (series.plot.barh if horizontal else series.plot.bar)(ax=ax, color="#4477aa")
    _save(fig, ax, title, xlabel, path)


def _hist(values: pd.Series, title: str, path: Path, xlabel: str, bins: int = 30) -> None:
    fig, ax = _axes()
    ax.hist(values, bins=bins, color="#4477aa")
    ax.set_ylabel("count")
    _save(fig, ax, title, xlabel, path)


def _md_table(df: pd.DataFrame) -> str:
    cols = list(df.columns)
    lines = ["| " + " | ".join(map(str, cols)) + " |", "|" + "---|" * len(cols)]
    lines += ["| " + " | ".join(str(v) for v in row) + " |" for row in df.itertuples(index=False)]
    return "\n".join(lines)


def pair_table(tables: Mapping[str, Path]) -> pd.DataFrame:
    """Pairs per dataset, split, label and kind (rows: dataset, split, kind, label, pairs)."""
    frames = []
    for name in ("policysm1", "policysm2"):  # shard by shard: counts merged
        parts = [df.groupby(["split", "kind", "label"]).size() for df in iter_table(tables[name], ["label", "kind"])]
        g = (pd.concat(parts).groupby(level=[0, 1, 2]).sum() if parts
             else pd.Series(dtype="int64", index=pd.MultiIndex.from_tuples([], names=["split", "kind", "label"])))
        g = g.reset_index(name="pairs")
        g.insert(0, "dataset", name)
        frames.append(g)
    return pd.concat(frames, ignore_index=True)


def sentence_lengths(sentences_dir: Path) -> pd.Series:
    """Sentence lengths in chars, read shard by shard (4 bytes per sentence held)."""
    parts = [df["text"].str.len().to_numpy(np.int32) for df in iter_table(sentences_dir, ["text"], batch_rows=50_000)]
    return pd.Series(np.concatenate(parts) if parts else np.zeros(0, np.int32))


def _round(x, digits: int = 4):
    """``round`` that keeps None (a probe on an empty split has no accuracy)."""
    return None if x is None else round(x, digits)


def _median(values: pd.Series) -> int:
    """Median as an int; 0 for an empty column (a corpus with no documents or sentences left)."""
    return int(values.median()) if len(values) else 0


def probe_table(tables: Mapping[str, Path]) -> pd.DataFrame:
    """Shortcut probe accuracy vs the majority baseline per dataset (from the dataset manifests)."""
    rows = []
    for name in ("policysm1", "policysm2"):
        p = read_manifest(tables[name])["stats"]["probe"]
        rows.append({"dataset": name, **{k: _round(p.get(v)) for k, v in (("probe_accuracy", "accuracy"),
                                                                          ("majority", "majority"),
                                                                          ("margin", "margin"))},
                     "n_test": p.get("n_test", 0)})
    return pd.DataFrame(rows)


def repeated_lines_section(clean_dir: Path, max_rows: int = 20) -> str:
    """Markdown: the lines the clean stage's repeated-line rule removed per source (site chrome: a line in
    more than ``repeat_share`` of a source's documents), from the ``documents_clean`` manifest."""
    m = read_manifest(clean_dir)
    per = m["stats"].get("repeated_lines")
    cfg = m.get("config") or {}
    rule = (f"a line in more than {cfg.get('repeat_share')} of a source's distinct documents, sources of at least "
            f"{cfg.get('repeat_min_docs')} documents")
    if per is None:
        return "## Repeated lines\n\nNot recorded (documents_clean written before the repeated-line rule)."
    if not per:
        return f"## Repeated lines\n\nNone removed ({rule})."
    rows = [{"source": src, "documents": v["documents"], "lines_removed": v["lines_removed"],
             "distinct_lines": v["distinct_lines"], "example": (v["examples"] or [""])[0][:60]}
            for src, v in list(per.items())[:max_rows]]
    return f"## Repeated lines\n\nRemoved as site chrome ({rule}):\n\n" + _md_table(pd.DataFrame(rows))


def ratio_section(tables: Mapping[str, Path], max_listed: int = 10) -> str:
    """Markdown: negatives per positive of each dataset and the PolicySM-2 documents below the thesis's
    1:5 (from the dataset manifests; tables written before these stats say "not recorded")."""
    rows = []
    for name in ("policysm1", "policysm2"):
        st = read_manifest(tables[name])["stats"]
        below = st.get("below_target") or {}
        rows.append({"dataset": name, "negatives_per_positive": st.get("negatives_per_positive", "not recorded"),
                     "target": st.get("target_negatives_per_positive", "-"),
                     "documents_below_target": (f"{below['documents']} of {below['of_documents']}" if below else "-")})
    below = (read_manifest(tables["policysm2"])["stats"].get("below_target") or {}).get("listed", [])
    text = "## Negatives per positive\n\n" + _md_table(pd.DataFrame(rows))
    if below:
        text += (f"\n\nPolicySM-2 documents that cannot reach the target (too few sentences after their positives; "
                 f"first {min(max_listed, len(below))}):\n\n" + _md_table(pd.DataFrame(below[:max_listed])))
    return text


def _markdown(docs, clean, rejects, sent_len, vocab_m, per_source, pairs, probe, tables) -> str:
    """The report's Markdown (the plots it names are written beside it by :func:`build_report`)."""
    vs = vocab_m["stats"]
    md = "\n\n".join([
        "# Dataset report",
        f"Documents: {len(docs)} imported from {docs['source'].nunique()} sources; {len(clean)} after cleaning; "
        f"rejects by reason: {rejects['reason'].value_counts().to_dict()}.",
        "## Documents per source (top 10)\n\n" + _md_table(per_source.rename_axis("source").reset_index(name="documents"))
        + "\n\n![sources](sources.png)",
        "## Publication years\n\n![years](years.png)",
        f"## Lengths\n\nDocuments: median {_median(clean['n_chars'])} chars; sentences: {len(sent_len)}, "
        f"median {_median(sent_len)} chars.\n\n![docs](doc_lengths.png) "
        "![sentences](sentence_lengths.png)",
        f"## Vocabulary\n\n{vs['size']} words (freq >= {vocab_m['config']['min_freq']}, "
        f"{vocab_m['config']['min_len']}-{vocab_m['config']['max_len']} chars); sentence coverage "
        f"{vs['sentence_coverage']:.2%}; segmenter {vs.get('backend')} ({vs.get('model_id')}). Top words: "
        + "、".join(w for w, _ in vs["top_words"][:15]),
        "## PolicySM pairs\n\n" + _md_table(pairs),
        ratio_section(tables),
        repeated_lines_section(tables["documents_clean"]),
        "## Shortcut probe\n\nLogistic regression on surface features (end marks, spaces, digits, latin, lengths) "
        "trained on train, scored on test; a leak-free dataset stays near the majority baseline.\n\n"
        + _md_table(probe),
    ])
    return md


def build_report(tables: Mapping[str, str | os.PathLike], out_dir: str | os.PathLike) -> dict:
    """Write ``report.md`` and the PNG plots into ``out_dir`` (atomically, as one folder).

    ``tables`` maps the report's inputs (``documents``, ``documents_clean``, ``rejects``, ``sentences``,
    ``vocab``, ``policysm1``, ``policysm2``: the reads of ``corpus.stages.REPORT``) to their table folders.
    Returns ``{"markdown": str, "pairs": DataFrame records, "probe": records, "files": [names]}``.

    Raises:
        KeyError: an input is missing from ``tables``; storage.TableError: a table folder has no manifest.
    """
    tables = {k: Path(v) for k, v in tables.items()}
    docs = read_table(tables["documents"], ["doc_id", "source", "pubtime"])
    clean = read_table(tables["documents_clean"], ["doc_id", "source", "pubtime", "n_chars"])
    rejects = read_table(tables["rejects"])
    sent_len = sentence_lengths(tables["sentences"])
    vocab_m = read_manifest(tables["vocab"])
    pairs, probe = pair_table(tables), probe_table(tables)
    per_source = clean["source"].value_counts().head(10)
    years = pd.to_datetime(clean["pubtime"], errors="coerce").dt.year.value_counts(dropna=False).sort_index()
    years.index = [str(int(y)) if pd.notna(y) else "unknown" for y in years.index]
    with atomic_path(out_dir) as tmp:
        tmp.mkdir()
        _bar(per_source.iloc[::-1], "Documents per source (top 10)", tmp / "sources.png", "documents", horizontal=True)
        _bar(years, "Publication years (cleaned corpus)", tmp / "years.png")
        _hist(clean["n_chars"], "Document lengths", tmp / "doc_lengths.png", "characters")
        _hist(sent_len, "Sentence lengths", tmp / "sentence_lengths.png", "characters", bins=50)
        md = _markdown(docs, clean, rejects, sent_len, vocab_m, per_source, pairs, probe, tables)
        (tmp / "report.md").write_text(md + "\n", encoding="utf-8")
    return {"markdown": md, "pairs": pairs.to_dict("records"), "probe": probe.to_dict("records"),
            "files": ["report.md", "sources.png", "years.png", "doc_lengths.png", "sentence_lengths.png"]}
