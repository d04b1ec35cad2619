"""A citation-stripped evaluation split (SPEC §12): regulations whose parent law is named only in a citation.

A regulation of the corpus (not a law, not titled as implementing one: :func:`docmatch.pairs.parent_title` finds
nothing) whose text opens a clause ``根据《X》…`` with ``X`` a law of the corpus (``level`` 法律, with or without
``中华人民共和国``) is paired with that law (the first law its first such clause names). The pair's regulation text
is the text with what names the parent stripped (:func:`docmatch.pairs.strip_other`: the ``根据《X》…，`` clause to
its first comma, every ``《X》`` and the bare title); other titles it names stay. Laws keep their own text.

The split is by law (:func:`docmatch.pairs.split_laws`, the same seeded split as the title-pattern pairs): a
regulation follows its parent, so a held-out law's regulations are never trained on.
"""
from __future__ import annotations

import re

import pandas as pd

from docmatch.pairs import LAW_LEVEL, PREFIX, PairConfig, parent_title, split_laws, strip_other

_CLAUSE = re.compile(r"根据《(?P<title>[^》\n]{2,80})》")


def cited_parent(text: str, by_title: dict[str, str]) -> str | None:
    """The law title (a key of ``by_title``) the first ``根据《X》`` clause of ``text`` names, when X is a law of
    ``by_title`` (as titled, or with / without ``中华人民共和国``); else None."""
    for m in _CLAUSE.finditer(text):
        x = m.group("title")
        short = x[len(PREFIX):] if x.startswith(PREFIX) else x
        for cand in (x, PREFIX + short, short):
            if cand in by_title:
                return cand
        return None
    return None


def citation_pairs(corpus: pd.DataFrame, cfg: PairConfig = PairConfig()) -> pd.DataFrame:
    """``a, b, law, split, label`` (1) for every citation regulation of ``corpus`` (module docstring), split by
    law with ``cfg``.

    Raises:
        ValueError: the corpus has no law or no such regulation.
    """
    laws = corpus[corpus["level"] == LAW_LEVEL]
    by_title = dict(zip(laws["title"], laws["id"]))
    split = split_laws(laws["title"], cfg)
    rows = []
    for r in corpus[corpus["level"] != LAW_LEVEL].itertuples(index=False):
        if parent_title(r.title, set(by_title)) is not None:
            continue
        p = cited_parent(r.text, by_title)
        if p is not None and p != r.title:
            rows.append((r.id, by_title[p], p, split[p], 1))
    if laws.empty or not rows:
        raise ValueError("the corpus has no regulation citing a law of the corpus with 根据《…》")
    return pd.DataFrame(rows, columns=["a", "b", "law", "split", "label"])


def stripped_texts(corpus: pd.DataFrame, pairs: pd.DataFrame) -> dict[str, str]:
    """id -> text: each pair's regulation with its parent's citation stripped (:func:`docmatch.pairs.strip_other`),
    every other document of ``corpus`` as it is."""
    texts = dict(zip(corpus["id"], corpus["text"]))
    for a, law in zip(pairs["a"], pairs["law"]):
        texts[a] = strip_other(texts[a], law)
    return texts


def sample_split(pairs: pd.DataFrame, per_split: dict[str, int], seed: int = 13) -> pd.DataFrame:
    """A seeded sample of ``pairs``: at most ``per_split[s]`` regulations of each split ``s`` (splits not named
    are dropped), so an evaluation embeds a bounded number of documents."""
    parts = [g.sample(min(len(g), per_split[s]), random_state=seed) for s, g in pairs.groupby("split")
             if s in per_split]
    return pd.concat(parts).sort_values(["split", "a"]).reset_index(drop=True)


DEFAULT_SAMPLE = {"train": 120, "dev": 40, "test": 40}  # citation regulations added to the default pair set


def default_citation_pairs(corpus: pd.DataFrame, cfg: PairConfig = PairConfig(),
                           per_split: dict[str, int] = DEFAULT_SAMPLE) -> pd.DataFrame:
    """A seeded sample (:data:`DEFAULT_SAMPLE` per split) of the corpus's citation pairs in the pair file's columns
    (``a, b, label, split, kind`` = ``citation``, ``law``), added to the title-pattern pairs of the default set
    (:func:`docmatch.stage.default_pairs`); empty when the corpus has none."""
    cols = ["a", "b", "label", "split", "kind", "law"]
    try:
        pairs = citation_pairs(corpus, cfg)
    except ValueError:
        return pd.DataFrame(columns=cols)
    return sample_split(pairs, per_split, cfg.seed).assign(kind="citation")[cols]
