"""A small data dir for the answer tests: the 8 policy-like documents of ``retrieval_builders`` as
``documents_clean`` with a tiny PolicyBERT index, and a scorer fitted on questions about them."""
from __future__ import annotations

from pathlib import Path

import pandas as pd

from tests.retrieval_builders import TOPICS, policy_docs, save_tiny_policybert, write_clean


def build_data_dir(root: Path, tokenizer) -> Path:
    """``root/data`` with ``documents_clean`` and ``index/v1`` (chunks of at most 120 chars)."""
    from retrieval.chunks import ChunkConfig
    from retrieval.stages import index_stage

    data = root / "data"
    clean = write_clean(policy_docs(), data / "documents_clean")
    ckpt = save_tiny_policybert(root / "models" / "finetune", seed=1)
    index_stage(clean, ckpt, data / "index", ChunkConfig(max_chars=120, overlap=30), tokenizer=tokenizer)
    return data


def questions() -> pd.DataFrame:
    """Questions with gold spans in the cleaned text: per document, what its opening sentence lists and
    what three of its numbered items say."""
    docs = policy_docs()
    rows = []
    for i, (title, topic, detail) in enumerate(TOPICS):
        text = docs.loc[i, "text"]
        rows.append((f"q{i}a", f"{topic}工作现就哪些方面提出意见？", detail, f"d{i}"))
        for j in (2, 7, 13):
            sent = f"第{j}项，围绕{topic}完善{detail.split('、')[j % 3]}的具体措施并抓好落实。"
            rows.append((f"q{i}{j}", f"{topic}第{j}项要完善什么？", sent, f"d{i}"))
    out = []
    for qid, q, ans, d in rows:
        text = docs.loc[int(d[1:]), "text"]
        s = text.find(ans)
        out.append({"qid": qid, "question": q, "answer": ans, "doc_id": d, "ext_doc": d,
                    "gold_start": s, "gold_end": s + len(ans)})
    return pd.DataFrame(out)


def fit_test_scorer(data: Path, tokenizer):
    """A scorer fitted on :func:`questions` (every one of them: the tests check plumbing, not accuracy)."""
    from answers.backend import SearchBackend
    from answers.documents import DocumentStore
    from answers.fit import build_examples, fit_scorer

    backend = SearchBackend(data / "index", tokenizer=tokenizer)
    store = DocumentStore(data / "documents_clean")
    return fit_scorer(build_examples(questions(), backend, store, log=lambda s: None), info={"test": True})
