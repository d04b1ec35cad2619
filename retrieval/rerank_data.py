"""Training groups for the cross-encoder reranker (:mod:`retrieval.cross_encoder`; SPEC §7, §9): one row per
query with its positive passage and its negatives, the FlagEmbedding reranker's ``{query, pos, neg}`` format
(Xiao et al. 2023, "C-Pack", arXiv:2309.07597), from three sources:

- ``ncpqa``: a question → the chunk of its document that holds the answer span; negatives the document's other
  chunks and the chunks of the documents BM25 retrieves for the question (a chunk holding the answer text is
  never a negative);
- ``lecoqa``: a legal question → a gold statute article; negatives the BM25 top articles that are not gold;
- ``mined``: a document's title → its opening passage, and its lead sentence → that passage with the lead cut
  out (the Inverse Cloze Task, Lee et al. 2019); negatives the opening passages BM25 ranks first among the
  other documents.

Held-out questions never train: NCPQA is split by document with the answer evaluation's own split (computed
by the caller: ``answers.ncpqa.split_by_document``, seed 13), LeCoQA by :func:`lecoqa_split` (groups of
questions with the same gold articles, seeded), and :func:`check_no_leak` refuses a training set that shares
a question, a question text or an NCPQA document with the held-out ones.
"""
from __future__ import annotations

import hashlib
from typing import Callable, Sequence

import numpy as np
import pandas as pd

COLUMNS = ["source", "qid", "doc_id", "query", "positive", "negatives"]
Search = Callable[[str, int], list]  # query, k -> hits (dicts or objects with doc_id, start, end, text)


class LeakError(ValueError):
    """A training set that holds a held-out question, its text, or a held-out NCPQA document."""


def _get(h, name):
    return h[name] if isinstance(h, dict) else getattr(h, name)


def lecoqa_split(questions: pd.DataFrame, test_share: float = 0.2, seed: int = 13) -> pd.Series:
    """``train``/``test`` per LeCoQA question (columns ``question``, ``gold_article_ids``): the distinct gold
    article sets are shuffled with ``seed`` and the first ``test_share`` of them hold the test questions, so
    questions about the same articles stay on one side; a training question whose text is also a test
    question's moves to test.

    Raises:
        ValueError: ``test_share`` outside (0, 1).
    """
    if not 0 < test_share < 1:
        raise ValueError(f"lecoqa_split: test_share must be in (0, 1), got {test_share}")
    keys = questions["gold_article_ids"].map(lambda g: "\x1f".join(sorted(map(str, g))))
    groups = np.array(sorted(keys.unique()))
    np.random.default_rng(seed).shuffle(groups)
    test = set(groups[:int(round(test_share * len(groups)))])
    split = keys.map(lambda k: "test" if k in test else "train")
    test_text = set(questions.loc[split == "test", "question"].str.strip())
    split[questions["question"].str.strip().isin(test_text)] = "test"
    return split


def lecoqa_dev_split(lq: pd.DataFrame, share: float, seed: int = 29) -> pd.Series:
    """``lq``'s ``split`` with ``share`` of its ``train`` questions moved to ``dev`` by
    :func:`lecoqa_split` (by gold article set, seed 29), so dev questions share no gold
    article set with training ones; ``test`` is left as it is.

    Raises:
        ValueError: ``share`` outside (0, 1)."""
    split = lq["split"].copy()
    train = lq[split == "train"]
    moved = lecoqa_split(train, share, seed)
    split[train.index[(moved == "test").to_numpy()]] = "dev"
    return split


def located_questions(questions: pd.DataFrame, split: str) -> pd.DataFrame:
    """The NCPQA questions of ``split`` whose gold was located in a document (a ``doc_id`` string)."""
    return questions[(questions["split"] == split) & questions["doc_id"].map(lambda d: isinstance(d, str))]


def check_no_leak(train: pd.DataFrame, held_out: pd.DataFrame, held_out_docs: Sequence[str] = ()) -> None:
    """Refuse training groups (:data:`COLUMNS`) that share a ``qid`` or a question text with ``held_out``
    (columns ``qid``, ``question``), or whose positive is a document of ``held_out_docs``.

    Raises:
        LeakError: naming the first shared question or document.
    """
    shared = set(train["qid"].astype(str)) & set(held_out["qid"].astype(str))
    if shared:
        raise LeakError(f"held-out question {sorted(shared)[0]} is in the reranker's training set")
    text = set(train["query"].str.strip()) & set(held_out["question"].str.strip())
    if text:
        raise LeakError(f"held-out question text {sorted(text)[0][:40]!r} is in the reranker's training set")
    docs = set(train["doc_id"].astype(str)) & set(map(str, held_out_docs))
    if docs:
        raise LeakError(f"held-out document {sorted(docs)[0]} is in the reranker's training set")


def _covers(start: int, end: int, a: int, b: int) -> bool:
    return start < b and a < end


def ncpqa_groups(questions: pd.DataFrame, chunks: pd.DataFrame, search: Search, excluded_docs: Sequence[str] = (),
                 depth: int = 30, max_negatives: int = 15) -> pd.DataFrame:
    """Groups (:data:`COLUMNS`) of NCPQA questions (``qid, question, answer, doc_id, gold_start, gold_end``:
    gold located in the index version's texts; rows without a gold span are skipped). Positive: the chunk of
    ``chunks`` (``doc_id, start, end, text``: the version's) that holds most of the gold span; negatives: the
    document's chunks that do not touch the span, then the chunks of the BM25 top ``depth`` (``search``) of other
    documents, none of ``excluded_docs`` (held-out documents) and none containing the answer text; at most
    ``max_negatives``."""
    by_doc = {d: g for d, g in chunks.groupby("doc_id", sort=False)}
    excluded, rows = set(map(str, excluded_docs)), []
    for r in questions.itertuples(index=False):
        g = by_doc.get(r.doc_id)
        if g is None or r.gold_start < 0:
            continue
        s, e = int(r.gold_start), int(r.gold_end)
        overlap = np.minimum(g["end"], e) - np.maximum(g["start"], s)
        if overlap.max() <= 0:
            continue
        pos = g["text"].iloc[int(np.argmax(overlap.to_numpy()))]
        own = [t for a, b, t in zip(g["start"], g["end"], g["text"]) if not _covers(s, e, a, b)]
        other = [str(_get(h, "text")) for h in search(r.question, depth)
                 if _get(h, "doc_id") != r.doc_id and str(_get(h, "doc_id")) not in excluded]
        negs = [t for t in dict.fromkeys(own[:5] + other + own[5:]) if r.answer not in t][:max_negatives]
        rows.append(("ncpqa", str(r.qid), str(r.doc_id), r.question, pos, negs))
    return pd.DataFrame(rows, columns=COLUMNS)


def lecoqa_groups(questions: pd.DataFrame, articles: pd.DataFrame, search_rows: Callable[[list[str], int], list],
                  depth: int = 30, max_negatives: int = 15, golds_per_question: int = 2) -> pd.DataFrame:
    """Groups of LeCoQA questions (``qid, question, gold_article_ids``) over ``articles`` (``doc_id, text``:
    the statute pool as indexed, :func:`retrieval.qa_eval.load_pool`): one per gold article (at most
    ``golds_per_question``), negatives the BM25 top ``depth`` articles (``search_rows(queries, depth)`` → pool
    rows per query) that are not gold, at most ``max_negatives``."""
    text_of = dict(zip(articles["doc_id"], articles["text"]))
    ids = articles["doc_id"].tolist()
    ranked = search_rows(questions["question"].tolist(), depth)
    rows = []
    for r, top in zip(questions.itertuples(index=False), ranked):
        gold = [str(g) for g in r.gold_article_ids if str(g) in text_of]
        negs = [text_of[ids[i]] for i in top if ids[i] not in set(gold)][:max_negatives]
        for g in gold[:golds_per_question]:
            rows.append(("lecoqa", str(r.qid), g, r.question, text_of[g], negs))
    return pd.DataFrame(rows, columns=COLUMNS)


def hybrid_search_rows(texts: list[str], encoder, encoder_id: str, bm25_rows: Callable[[list[str], int], list],
                       cache=None, rrf_k: int = 60, skip: int = 0) -> Callable[[list[str], int], list[list[int]]]:
    """``search_rows(queries, k)`` → ``k`` rows of ``texts`` per query: :func:`retrieval.fusion.fuse` (RRF,
    equal weights; Cormack et al. 2009) of ``encoder``'s exact dense top ``k + skip`` (its ``encode_corpus``
    vectors, cached under ``cache`` by :func:`retrieval.qa_eval.cached_embeddings`) and ``bm25_rows(queries,
    k + skip)``, the first ``skip`` fused rows left out. Negatives as the hybrid search the reranker reorders
    would find them, not BM25's alone; ``skip`` leaves out its top, where unlabelled positives sit (the
    denoising of RocketQA, Qu et al. 2021, in its simplest form)."""
    from retrieval.fusion import fuse
    from retrieval.qa_eval import cached_embeddings

    vecs = cached_embeddings(encoder.encode_corpus, list(texts), encoder_id, cache)

    def rows(queries, k: int) -> list[list[int]]:
        queries, n = list(queries), k + skip
        sims = np.asarray(encoder.encode_queries(queries)) @ vecs.T
        dense = np.argsort(-sims, axis=1, kind="stable")[:, :n]
        # BM25 in fuse's first slot so that ties go to the dense side's order (rank on the second side first)
        return [[r for r, *_ in fuse(list(sp), d.tolist(), 0.5, rrf_k)][skip:n]
                for d, sp in zip(dense, bm25_rows(queries, n))]

    return rows


def _opening(text: str, title: str, chars: int) -> str:
    """The first ``chars`` characters of ``text`` after its title line, when it opens with it."""
    body = text[len(title):].lstrip() if title and text.startswith(title) else text
    return body[:chars]


def mined_groups(docs: pd.DataFrame, tokenize: Callable[[Sequence[str]], list], chars: int = 600,
                 depth: int = 20, max_negatives: int = 15, max_docs: int = 400, seed: int = 13) -> pd.DataFrame:
    """Groups mined from documents (``doc_id, title, text``; at most ``max_docs``, a seeded sample): ``title``
    → the opening passage (``chars`` after the title) and ``lead`` (:func:`retrieval.mining.lead_sentence`)
    → that passage with the lead cut out; negatives: the other documents' opening passages ranked by BM25
    (``tokenize``: the segmenter) for the query, at most ``max_negatives``. ``qid`` is ``mined:<kind>:<doc>``."""
    from retrieval.mining import lead_sentence
    from retrieval.sparse import SparseIndex

    docs = docs.drop_duplicates("text").reset_index(drop=True)
    if len(docs) > max_docs:
        docs = docs.sample(max_docs, random_state=seed).reset_index(drop=True)
    titles = docs["title"].fillna("").astype(str).str.strip().tolist()
    openings = [_opening(str(t), ti, chars) for t, ti in zip(docs["text"], titles)]
    index = SparseIndex.build(tokenize(openings))
    queries = []
    for i, (ti, op) in enumerate(zip(titles, openings)):
        if len(ti) >= 4:
            queries.append(("title", i, ti, op))
        lead = lead_sentence(op)
        if lead and len(op.replace(lead, "")) > 50:
            queries.append(("lead", i, lead, op.replace(lead, "", 1)))
    rows = []
    for (kind, i, q, pos), toks in zip(queries, tokenize([q for _, _, q, _ in queries])):
        top, _ = index.top(toks, depth + 1)
        negs = [openings[j] for j in top if j != i and openings[j] != pos][:max_negatives]
        if len(negs) < max_negatives:  # too few BM25 matches: fill with random other openings
            rng = np.random.default_rng(int(hashlib.sha256(q.encode()).hexdigest()[:8], 16))
            negs += [openings[j] for j in rng.permutation(len(openings)) if j != i][:max_negatives - len(negs)]
        rows.append(("mined", f"mined:{kind}:{docs['doc_id'][i]}", str(docs["doc_id"][i]), q, pos, negs))
    return pd.DataFrame(rows, columns=COLUMNS)


def to_groups(frame: pd.DataFrame) -> list[tuple[str, str, list[str]]]:
    """(query, positive, negatives) tuples of a groups frame, as :func:`retrieval.cross_encoder.train` reads."""
    return [(q, p, list(n)) for q, p, n in zip(frame["query"], frame["positive"], frame["negatives"])]


def ncpqa_sentence_groups(questions: pd.DataFrame, texts: dict, tokenize: Callable[[Sequence[str]], list],
                          sentences: Callable[[str], list], excluded_docs: Sequence[str] = (),
                          max_negatives: int = 15) -> pd.DataFrame:
    """Sentence-level groups (:data:`COLUMNS`, source ``ncpqa-sentence``) of NCPQA questions (``qid, question,
    answer, doc_id, gold_start, gold_end``) over ``texts`` (doc_id → the version's cleaned text): the positive
    is the sentence (``sentences(text)`` → (start, end) offsets: the answer stage's
    ``answers.candidates.sentence_offsets``) holding most of the gold span; the negatives are
    the document's other sentences in the order the question's BM25 ranks them (the cascade's hard negatives:
    the answer scorer chooses among exactly these), none containing the answer text; at most
    ``max_negatives``. Documents of ``excluded_docs`` (held out) give no group."""
    from retrieval.sparse import SparseIndex

    excluded, rows = set(map(str, excluded_docs)), []
    for r in questions.itertuples(index=False):
        text = texts.get(r.doc_id) if isinstance(r.doc_id, str) else None
        if text is None or r.doc_id in excluded or r.gold_start < 0:
            continue
        sents = list(sentences(text))
        s, e = int(r.gold_start), int(r.gold_end)
        overlap = np.array([min(b, e) - max(a, s) for a, b in sents] or [0])
        if len(sents) < 2 or overlap.max() <= 0:
            continue
        pos = int(np.argmax(overlap))
        cand = [i for i, (a, b) in enumerate(sents) if i != pos and not _covers(s, e, a, b)]
        if not cand:
            continue
        texts_c = [text[sents[i][0]:sents[i][1]] for i in cand]
        order, _ = SparseIndex.build(tokenize(texts_c)).top(tokenize([r.question])[0], len(cand))
        ranked = list(dict.fromkeys([int(i) for i in order] + list(range(len(cand)))))
        negs = [texts_c[i] for i in ranked if r.answer not in texts_c[i]][:max_negatives]
        if negs:
            a, b = sents[pos]
            rows.append(("ncpqa-sentence", str(r.qid), str(r.doc_id), r.question, text[a:b], negs))
    return pd.DataFrame(rows, columns=COLUMNS)
