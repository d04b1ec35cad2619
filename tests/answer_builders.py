"""A small data dir for the answer tests: the 8 policy-like documents of ``retrieval_builders`` as
``documents_clean`` with a tiny PolicyBERT index whose version holds a scorer fitted on questions about them
(fitted over a first data dir built the same way, then installed into the served one as a shipped scorer is:
its provenance, the encoder and segmenter, must match)."""
from __future__ import annotations

from pathlib import Path

import pandas as pd

from tests.retrieval_builders import TOPICS, policy_docs, save_tiny_policybert, write_clean


def build_data_dir(root: Path, tokenizer, scorer: bool = True, docs: pd.DataFrame | None = None) -> Path:
    """``root/data`` with ``documents_clean`` and ``index/v1`` (chunks of at most 120 chars); with ``scorer``
    its version holds the answer scorer of :func:`scorer_file` (``root/scorer.json``)."""
    data = root / "data"
    publish(data, root / "models" / "finetune", tokenizer, scorer_file(root, tokenizer) if scorer else None,
            docs)
    return data


def publish(data: Path, ckpt: Path, tokenizer, answer_scorer: Path | None = None, docs: pd.DataFrame | None = None):
    """Write ``docs`` (default :func:`policy_docs`) as ``data/documents_clean`` and publish the next index version
    over them (the tiny PolicyBERT of seed 1 at ``ckpt``) with ``answer_scorer`` installed."""
    from retrieval.chunks import ChunkConfig
    from retrieval.stages import index_stage

    clean = write_clean(policy_docs() if docs is None else docs, data / "documents_clean")
    if not (ckpt / "config.json").is_file():
        save_tiny_policybert(ckpt, seed=1)
    return index_stage(clean, ckpt, data / "index", ChunkConfig(max_chars=120, overlap=30), tokenizer=tokenizer,
                       answer_scorer=answer_scorer)


def scorer_file(root: Path, tokenizer) -> Path:
    """``root/scorer.json``: :func:`fit_test_scorer` over a data dir ``root/fit`` built as the served one is (made
    once per ``root``)."""
    path = root / "scorer.json"
    if not path.is_file():
        fit = root / "fit"
        publish(fit, root / "models" / "finetune", tokenizer)
        fit_test_scorer(fit, tokenizer).save(path)
    return path


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
    """A scorer fitted on :func:`questions` (every one of them: the tests check plumbing, not accuracy) over the
    serving index of ``data``, with that version's provenance."""
    from answers.backend import SearchBackend
    from answers.documents import DocumentStore
    from answers.fit import build_examples, fit_scorer
    from answers.scorer import provenance
    from retrieval.parts import version_identity

    backend = SearchBackend(data / "index", tokenizer=tokenizer)
    store = DocumentStore(data / "documents_clean")
    prov = provenance(backend.model_id, version_identity(backend.bundle.manifest)["segmenter"], "test questions")
    return fit_scorer(build_examples(questions(), backend, store, log=lambda s: None),
                      info={"test": True, "provenance": prov})
