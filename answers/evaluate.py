"""Answer evaluation on questions with gold spans (SPEC §9; NCPQA, ``../shared/qa/README.md``): answer hit@1
and hit@3 (a returned span overlaps the gold span in the gold document), top-1 char-F1 and exact match
against the gold answer, document recall@k of the grouped hybrid search, the calibration of the score, and
two baselines that cannot learn: BM25 over every sentence of the pool, and the first sentence of the top
BM25 chunk."""
from __future__ import annotations

import numpy as np
import pandas as pd

from answers.answer import rank_answers
from answers.candidates import sentence_offsets
from answers.fit import is_hit
from answers.metrics import char_f1, exact_match, overlaps


def _row(system: str, hits1, hits3, f1, em, **extra) -> dict:
    return {"system": system, "hit@1": float(np.mean(hits1)), "hit@3": float(np.mean(hits3)),
            "char_f1": float(np.mean(f1)), "exact_match": float(np.mean(em)), "questions": len(hits1), **extra}


def evaluate_scorer(examples: list[tuple], scorer, system: str = "answers (learned)") -> tuple[dict, pd.DataFrame]:
    """Metrics of the scorer on ``examples`` ((row, Prepared) from :func:`answers.fit.build_examples`, built
    without the gold document) and a per-question frame (qid, hit1, hit3, f1, score, doc_rank_of_gold).

    Raises:
        ValueError: a question's document is among the scorer's ``info["fitted_documents"]`` (its figures would
            measure what the scorer was fitted on).
    """
    check_unseen(examples, scorer)
    h1, h3, f1, em, per = [], [], [], [], []
    recall = {1: [], 3: [], 5: []}
    for row, prep in examples:
        ans = rank_answers(prep, scorer, 3)
        top = ans[0] if ans else None
        h1.append(bool(top) and is_hit(top, row))
        h3.append(any(is_hit(a, row) for a in ans))
        f1.append(char_f1(top["text"], row.answer) if top else 0.0)
        em.append(exact_match(top["text"], row.answer) if top else 0.0)
        ranks = [g for g, d in enumerate(prep.docs) if d.doc_id == row.doc_id and not d.extra]
        for k in recall:
            recall[k].append(bool(ranks) and ranks[0] < k)
        per.append({"qid": row.qid, "hit1": h1[-1], "hit3": h3[-1], "f1": f1[-1],
                    "score": top["score"] if top else 0.0, "answer_doc_ok": bool(top) and top["doc_id"] == row.doc_id})
    df = pd.DataFrame(per)
    extra = {f"doc_recall@{k}": float(np.mean(v)) for k, v in recall.items()}
    extra["answer_doc_acc"] = float(df["answer_doc_ok"].mean()) if len(df) else 0.0
    return _row(system, h1, h3, f1, em, **extra), df


def check_unseen(examples: list[tuple], scorer) -> None:
    """Raise ``ValueError`` when a question of ``examples`` ((row, Prepared)) is about a document the scorer
    was fitted on (its ``info["fitted_documents"]``, written by :func:`answers.fit.fit_scorer`): a leak."""
    seen = set(scorer.info.get("fitted_documents") or ())
    leak = sorted({row.doc_id for row, _ in examples if isinstance(row.doc_id, str)} & seen)
    if leak:
        raise ValueError(f"{len(leak)} of the evaluated questions' documents were fitted on by this scorer "
                         f"(e.g. {', '.join(leak[:3])}): evaluate it on questions about other documents")


def calibration(per: pd.DataFrame, threshold: float, bins=(0.0, 0.2, 0.4, 0.6, 0.8, 1.0)) -> dict:
    """Held-out calibration: per score bin the questions, mean score and hit@1 rate; and above/below the
    threshold the share of questions and their hit@1."""
    b = pd.cut(per["score"], list(bins), include_lowest=True)
    table = per.groupby(b, observed=True).agg(n=("hit1", "size"), mean_score=("score", "mean"), hit1=("hit1", "mean"))
    above = per["score"] >= threshold
    return {"bins": {str(k): {c: float(v) for c, v in r.items()} for k, r in table.iterrows()},
            "threshold": threshold, "answered_share": float(above.mean()),
            "hit1_answered": float(per.loc[above, "hit1"].mean()) if above.any() else None,
            "hit1_refused": float(per.loc[~above, "hit1"].mean()) if (~above).any() else None}


def pool_sentences(store) -> pd.DataFrame:
    """Every sentence of every cleaned document: doc_id, start, end, text."""
    rows = [(d, s, e, t[s:e]) for d, t in store.text.items() for s, e in sentence_offsets(t)]
    return pd.DataFrame(rows, columns=["doc_id", "start", "end", "text"])


def bm25_sentence_baseline(rows, sentences: pd.DataFrame, tokenize) -> dict:
    """Baseline 1: BM25 over every sentence of the pool; the top 3 sentences are the answers."""
    from retrieval.sparse import SparseConfig, SparseIndex

    sp = SparseIndex.build(tokenize(sentences["text"].tolist()), SparseConfig())
    q_toks = tokenize([r.question for r in rows])
    h1, h3, f1, em = [], [], [], []
    for r, qt in zip(rows, q_toks):
        top = sp.top(qt, 3)[0].tolist()
        got = [_hit_row(sentences.iloc[i], r) for i in top]
        h1.append(bool(got) and got[0])
        h3.append(any(got))
        t = sentences["text"].iat[top[0]] if top else ""
        f1.append(char_f1(t, r.answer))
        em.append(exact_match(t, r.answer))
    return _row("baseline: BM25 over all sentences", h1, h3, f1, em)


def _hit_row(s, r) -> bool:
    return s["doc_id"] == r.doc_id and r.gold_start >= 0 and overlaps(s["start"], s["end"], r.gold_start, r.gold_end)


def first_sentence_baseline(rows, search, store) -> dict:
    """Baseline 2: the first sentence of each of the top 3 BM25 chunks (``search(question, k)`` ->
    :class:`~retrieval.hits.SearchHit` s)."""
    h1, h3, f1, em = [], [], [], []
    for r in rows:
        got, texts = [], []
        for h in search(r.question, 3):
            text, _ = store.get(h.doc_id)
            sents = sentence_offsets(text[h.start:h.end]) if text else []
            s, e = (sents[0][0] + h.start, sents[0][1] + h.start) if sents else (h.start, h.end)
            got.append(h.doc_id == r.doc_id and r.gold_start >= 0 and overlaps(s, e, r.gold_start, r.gold_end))
            texts.append(text[s:e] if text else h.text)
        h1.append(bool(got) and got[0])
        h3.append(any(got))
        f1.append(char_f1(texts[0], r.answer) if texts else 0.0)
        em.append(exact_match(texts[0], r.answer) if texts else 0.0)
    return _row("baseline: first sentence of the top BM25 chunk", h1, h3, f1, em)


def oracle_row(examples: list[tuple]) -> dict:
    """The ceiling of the candidates: whether any candidate span of the retrieved documents overlaps the gold
    span, and the best char-F1 among them."""
    hit, f1 = [], []
    for row, prep in examples:
        best, any_hit = 0.0, False
        for g, d in enumerate(prep.docs):
            if d.doc_id != row.doc_id or d.extra or row.gold_start < 0:
                continue
            for i in np.flatnonzero(prep.span_doc == g):
                sp = prep.spans[i]
                if overlaps(sp.start, sp.end, row.gold_start, row.gold_end):
                    any_hit = True
                    best = max(best, char_f1(d.text[sp.start:sp.end], row.answer))
        hit.append(any_hit)
        f1.append(best)
    return _row("ceiling: best candidate of the retrieved documents", hit, hit, f1, [0.0] * len(hit))


def cross_validate(fit_examples: list[tuple], serve_examples: list[tuple], folds: int = 5, seeds=(0, 1, 2),
                   temperatures=(0.0, 0.25), fit=None) -> dict:
    """Repeated k-fold cross-validation by document, for choosing features and settings on training questions
    only: per seed the documents are dealt into ``folds`` folds; a scorer fitted on the other folds'
    ``fit_examples`` answers each fold's ``serve_examples`` (the same questions, in the same order, prepared as
    serving prepares them) under each minimum-Bayes-risk temperature. ``fit``: ``examples -> AnswerScorer``
    (default :func:`answers.fit.fit_scorer` with in-sample calibration). Returns ``{temperature: {"hit@1",
    "char_f1", "hit@1_se", "char_f1_se", "questions"}}`` (means over every seed's answers; standard errors over
    questions).

    Raises:
        ValueError: the two lists differ in length or question order, or fewer documents than ``folds``.
    """
    from dataclasses import replace

    from answers.fit import fit_scorer

    if len(fit_examples) != len(serve_examples) or any(
            a[0].qid != b[0].qid for a, b in zip(fit_examples, serve_examples)):
        raise ValueError("fit_examples and serve_examples must hold the same questions in the same order")
    docs = sorted({str(r.doc_id) for r, _ in fit_examples})
    if len(docs) < folds:
        raise ValueError(f"{len(docs)} documents for {folds} folds")
    fit = fit or (lambda ex: fit_scorer(ex, calib_folds=1))
    got = {float(t): ([], []) for t in temperatures}
    for seed in seeds:
        fold_of = {d: i % folds for i, d in enumerate(np.random.default_rng(seed).permutation(docs))}
        fold = np.array([fold_of[str(r.doc_id)] for r, _ in fit_examples])
        for k in range(folds):
            scorer = fit([fit_examples[i] for i in np.flatnonzero(fold != k)])
            for t, (hits, f1s) in got.items():
                s = replace(scorer, mbr_temperature=t)
                for i in np.flatnonzero(fold == k):
                    row, prep = serve_examples[i]
                    top = rank_answers(prep, s, 1)
                    hits.append(float(bool(top) and is_hit(top[0], row)))
                    f1s.append(char_f1(top[0]["text"], row.answer) if top else 0.0)
    n = len(fit_examples)
    return {str(t): {"hit@1": float(np.mean(h)), "char_f1": float(np.mean(f)),
                     "hit@1_se": float(np.std(h) / np.sqrt(n)), "char_f1_se": float(np.std(f) / np.sqrt(n)),
                     "questions": n} for t, (h, f) in got.items()}
