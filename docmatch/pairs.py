"""Labelled related-document pairs from title structure (SPEC §12), never from the words being matched.

In a corpus of laws and regulations (``../shared/corpora/lawrefbook.jsonl.gz``: ``id, title, text, date, level,
category``) a regulation titled ``XX省实施《中华人民共和国YY法》办法`` (also ``…若干规定``, ``…条例``,
``…细则``), ``YY法实施条例`` or ``YY法实施细则`` implements the national law titled ``中华人民共和国YY法`` (or
``YY法`` when the corpus titles it so). Each such regulation gives one positive pair ``(regulation, law)``;
negatives are other laws of the parent's ``level`` (random) and, harder, of its ``category``.

The split is by law (:func:`split_laws`): every law of the corpus, parent or not, is assigned train/dev/test
by a seeded shuffle and a regulation follows its parent, so no law is on both sides and every negative of a
pair comes from the pair's own split.

Stripping is applied at load (:func:`strip_citations`, used by :func:`load_texts`), not stored in the pair file:
the pair file holds ids only (``{"a", "b", "label", "split", "kind"}``), so users can bring their own labels.
The stripping does not depend on the pair: from EVERY text it removes the citing clause ``根据《…》…，``,
every ``《…》`` title and every bare title (full and without ``中华人民共和国``) of any law of the corpus —
so a document's text, its segments and their embeddings are the same whichever document it is matched with,
and no pair can be told apart by its own title mention.

CLI: ``python -m docmatch.pairs --corpus FILE --out PAIRS.jsonl [--seed 13] [--level-negatives 3]
[--category-negatives 3]`` prints the counts as one JSON line.
"""
from __future__ import annotations

import argparse
import gzip
import json
import random
import re
import sys
from dataclasses import dataclass
from pathlib import Path

import pandas as pd

from storage import atomic_write_text

LAW_LEVEL = "法律"
PREFIX = "中华人民共和国"
_IMPLEMENTS = re.compile(r"实施《(?P<law>[^》]{2,80})》(?:若干)?(?:办法|条例|规定|细则)$")
_RULES = re.compile(r"^(?P<law>[^《》]{1,80}法)实施(?:条例|细则)$")
_CITING = re.compile(r"根据《[^》]{0,80}》[^，,。；;\n]{0,80}[，,]")
_BOOK_TITLE = re.compile(r"《[^》\n]{0,80}》")
SPLITS = ("train", "dev", "test")


@dataclass(frozen=True)
class PairConfig:
    """seed: the split's and the negatives' seed; dev / test: shares of laws held out (the rest train);
    level_negatives / category_negatives: negatives per regulation from the parent's level / category."""

    seed: int = 13
    dev: float = 0.2
    test: float = 0.2
    level_negatives: int = 3
    category_negatives: int = 3

    def __post_init__(self):
        if not (0 < self.dev < 1 and 0 < self.test < 1 and self.dev + self.test < 1):
            raise ValueError(f"dev {self.dev} and test {self.test} must be shares in (0, 1) summing below 1")
        if min(self.level_negatives, self.category_negatives) < 0:
            raise ValueError("negatives per regulation must be >= 0")


def read_corpus(path: str | Path) -> pd.DataFrame:
    """The corpus as a table (``id, title, text``; ``level, category, date`` None when absent), JSON Lines,
    gzip or not; of
    documents sharing a title only the latest (by ``date``, then file order) is kept.

    Raises:
        FileNotFoundError: no such file. ValueError: a line that is not a JSON object, or a missing column.
    """
    opener = gzip.open if str(path).endswith(".gz") else open
    with opener(path, "rt", encoding="utf-8") as fh:
        rows = [json.loads(line) for line in fh if line.strip()]
    df = pd.DataFrame(rows)
    missing = [c for c in ("id", "title", "text") if c not in df.columns]
    if missing:
        raise ValueError(f"{path}: corpus lacks columns {missing}")
    for c in ("level", "category"):
        df[c] = df[c] if c in df.columns else None
    df["id"] = df["id"].astype(str)
    df["date"] = df["date"].fillna("") if "date" in df.columns else ""
    df = df.reset_index().sort_values(["date", "index"]).drop_duplicates("title", keep="last")
    return df.sort_values("index").drop(columns="index").reset_index(drop=True)


def parent_title(title: str, law_titles: set[str]) -> str | None:
    """The title of the law a regulation titled ``title`` implements (title patterns of the module
    docstring), when that law is in ``law_titles`` (with or without the ``中华人民共和国`` prefix); else None."""
    m = _IMPLEMENTS.search(title) or _RULES.match(title)
    if m is None:
        return None
    law = m.group("law")
    short = law[len(PREFIX):] if law.startswith(PREFIX) else law
    for cand in (law, PREFIX + short, short):
        if cand in law_titles and cand != title:
            return cand
    return None


def title_pattern(law_titles) -> re.Pattern:
    """One regex matching any law title of ``law_titles`` bare in a text: the full title and the title without
    ``中华人民共和国`` (at least 2 chars), longest first."""
    names = set()
    for t in law_titles:
        names.add(t)
        short = t[len(PREFIX):] if t.startswith(PREFIX) else t
        if len(short) >= 2:
            names.add(short)
    alts = sorted(names, key=lambda s: (-len(s), s))
    return re.compile("|".join(re.escape(a) for a in alts)) if alts else re.compile(r"(?!x)x")


def strip_citations(text: str, titles: re.Pattern) -> str:
    """``text`` without the citing clause ``根据《…》…，`` (up to its first comma), without every ``《…》``
    title and without every bare law title ``titles`` matches (:func:`title_pattern`): what names another
    document is removed before matching (SPEC §12)."""
    text = _CITING.sub("", text)
    text = _BOOK_TITLE.sub("", text)
    return titles.sub("", text)


def title_names(title: str) -> tuple[str, ...]:
    """The names a document titled ``title`` goes by in other texts: the title and its short form without
    ``中华人民共和国``, each of at least 2 chars, longest first."""
    short = title[len(PREFIX):] if title.startswith(PREFIX) else title
    return tuple(sorted({n for n in (title, short) if len(n) >= 2}, key=len, reverse=True))


def strip_other(text: str, other_title: str) -> str:
    """``text`` without what names ONE other document (SPEC §12's pair-specific stripping): the citing clause
    ``根据《other》…，`` (to its first comma), ``《other》`` and the bare title, full and without ``中华人民共和国``
    (when the short form has at least 2 chars). Other titles stay. Unchanged text when nothing matches."""
    short = other_title[len(PREFIX):] if other_title.startswith(PREFIX) else other_title
    if short not in text:  # the full title contains the short one: nothing to strip
        return text
    names = "|".join(re.escape(n) for n in title_names(other_title))
    if not names:
        return text
    text = re.sub(rf"根据《(?:{names})》[^，,。；;\n]{{0,80}}[，,]", "", text)
    return re.sub(names, "", text.replace(f"《{other_title}》", "").replace(f"《{short}》", ""))


def split_laws(law_titles, cfg: PairConfig = PairConfig()) -> dict[str, str]:
    """law title -> ``train`` | ``dev`` | ``test``: a shuffle of the sorted titles with ``cfg.seed``, the first
    ``cfg.test`` share test, the next ``cfg.dev`` dev."""
    titles = sorted(set(law_titles))
    random.Random(cfg.seed).shuffle(titles)
    n_test, n_dev = round(len(titles) * cfg.test), round(len(titles) * cfg.dev)
    return {t: ("test" if i < n_test else "dev" if i < n_test + n_dev else "train") for i, t in enumerate(titles)}


def parents(corpus: pd.DataFrame) -> pd.DataFrame:
    """``(a, b, law)`` for each regulation ``a`` (not itself a law) whose title names a law ``b`` of the corpus
    (:func:`parent_title`); ``law`` is the law's title."""
    laws = corpus[corpus["level"] == LAW_LEVEL]
    by_title = dict(zip(laws["title"], laws["id"]))
    rows = []
    for r in corpus[corpus["level"] != LAW_LEVEL].itertuples(index=False):
        p = parent_title(r.title, set(by_title))
        if p is not None:
            rows.append((r.id, by_title[p], p))
    return pd.DataFrame(rows, columns=["a", "b", "law"])


def derive_pairs(corpus: pd.DataFrame, cfg: PairConfig = PairConfig()) -> pd.DataFrame:
    """The labelled pairs of :func:`parents` with their negatives (module docstring): columns ``a, b, label,
    split, kind`` (``parent`` | ``level`` | ``category``), ``law`` (the parent's title).

    Raises:
        ValueError: the corpus has no law or no regulation implementing one.
    """
    laws = corpus[corpus["level"] == LAW_LEVEL]
    pos = parents(corpus)
    if laws.empty or pos.empty:
        raise ValueError("the corpus has no law with a regulation titled as implementing it")
    split = split_laws(laws["title"], cfg)
    laws = laws.assign(split=laws["title"].map(split))
    rng, rows = random.Random(cfg.seed), []
    for r in pos.itertuples(index=False):
        s = split[r.law]
        cat = laws.loc[laws["id"] == r.b, "category"].iloc[0]
        pool = laws[(laws["split"] == s) & (laws["id"] != r.b)]
        rows.append((r.a, r.b, 1, s, "parent", r.law))
        hard = sorted(pool.loc[pool["category"] == cat, "id"])
        picked = rng.sample(hard, min(cfg.category_negatives, len(hard)))
        rest = sorted(set(pool["id"]) - set(picked))
        level = rng.sample(rest, min(cfg.level_negatives, len(rest)))
        kinds = ["category"] * len(picked) + ["level"] * len(level)
        picked += level
        rows += [(r.a, b, 0, s, k, r.law) for b, k in zip(picked, kinds)]
    return pd.DataFrame(rows, columns=["a", "b", "label", "split", "kind", "law"])


def write_pairs(pairs: pd.DataFrame, out: str | Path) -> None:
    """Write ``pairs`` as JSON Lines (one object a pair, UTF-8), atomically."""
    lines = [json.dumps(r, ensure_ascii=False) for r in pairs.to_dict("records")]
    atomic_write_text(out, "\n".join(lines) + "\n")


def read_pairs(path: str | Path, id_a: str = "a", id_b: str = "b") -> pd.DataFrame:
    """A pair file (JSON Lines with ids ``id_a``, ``id_b``; ``label`` 0/1 and ``split`` when given) as columns
    ``a, b`` (strings) plus the file's other fields.

    Raises:
        FileNotFoundError: no such file. ValueError: a line that is not a JSON object, or one without both ids,
            or a label other than 0/1.
    """
    rows = []
    for i, line in enumerate(Path(path).read_text(encoding="utf-8-sig").splitlines(), 1):  # a BOM is the file's
        if not line.strip():
            continue
        try:
            d = json.loads(line)
        except (ValueError, RecursionError):
            raise ValueError(f"{path}:{i}: not JSON (or nested too deep)") from None
        if not isinstance(d, dict) or id_a not in d or id_b not in d:
            raise ValueError(f"{path}:{i}: a pair needs the ids {id_a!r} and {id_b!r}")
        if "label" in d and d["label"] not in (0, 1):
            raise ValueError(f"{path}:{i}: label must be 0 or 1, got {d['label']!r}")
        rows.append({**d, "a": str(d.pop(id_a)), "b": str(d.pop(id_b))})
    return pd.DataFrame(rows)


def load_texts(corpus: pd.DataFrame, ids=None) -> dict[str, str]:
    """id -> stripped text (:func:`strip_citations` with the titles of every law of ``corpus``) of ``ids``
    (default: every document)."""
    titles = title_pattern(corpus.loc[corpus["level"] == LAW_LEVEL, "title"])
    sub = corpus if ids is None else corpus[corpus["id"].isin(set(ids))]
    return {i: strip_citations(t, titles) for i, t in zip(sub["id"], sub["text"])}


def main(argv: list[str] | None = None) -> int:
    p = argparse.ArgumentParser(prog="python -m docmatch.pairs", description=__doc__.split("\n\n")[0])
    p.add_argument("--corpus", required=True)
    p.add_argument("--out", required=True)
    p.add_argument("--seed", type=int, default=PairConfig.seed)
    p.add_argument("--level-negatives", type=int, default=PairConfig.level_negatives)
    p.add_argument("--category-negatives", type=int, default=PairConfig.category_negatives)
    a = p.parse_args(argv)
    try:
        cfg = PairConfig(seed=a.seed, level_negatives=a.level_negatives, category_negatives=a.category_negatives)
        pairs = derive_pairs(read_corpus(a.corpus), cfg)
    except (OSError, ValueError) as exc:
        print(f"error: {exc}", file=sys.stderr)
        return 2
    write_pairs(pairs, a.out)
    counts = pairs.groupby(["split", "label"]).size()
    pos = pairs[pairs["label"] == 1]
    laws = {s: int(pos.loc[pos["split"] == s, "b"].nunique()) for s in SPLITS}
    print(json.dumps({"pairs": int(len(pairs)), "parent_laws": laws,
                      "by_split_label": {f"{s}/{lab}": int(n) for (s, lab), n in counts.items()}}, ensure_ascii=False))
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
