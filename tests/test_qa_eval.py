"""Evaluation on real-question-shaped data (a pool of articles, questions with gold article ids)."""
import json

import pandas as pd

from tests.retrieval_builders import TOPICS, save_tiny_policybert


def _write_qa(tmp_path):
    arts, qs = [], []
    for i, (title, topic, detail) in enumerate(TOPICS):
        for j, part in enumerate(detail.split("、")):
            aid = f"art-{i}-{j}"
            arts.append({"article_id": aid, "law_id": f"law{i}", "law_title": title, "article": f"第{j + 1}条",
                         "text": f"第{j + 1}条 有关部门应当加强{part}工作，完善{topic}相关制度。"})
            qs.append({"qid": f"q{i}-{j}", "question": f"{part}应该怎么做？", "answer": "",
                       "gold_article_ids": [aid], "cited": []})
    pool, questions = tmp_path / "statutes.jsonl", tmp_path / "questions.jsonl"
    pool.write_text("\n".join(json.dumps(a, ensure_ascii=False) for a in arts), encoding="utf-8")
    questions.write_text("\n".join(json.dumps(q, ensure_ascii=False) for q in qs), encoding="utf-8")
    return pool, questions


def test_qa_eval_cli_writes_the_table(tmp_path, capsys):
    from flows.qa_eval import main
    from retrieval.qa_eval import load_pool

    pool, questions = _write_qa(tmp_path)
    p = load_pool(pool)
    assert p["body"].iloc[0].startswith("有关部门") and p["text"].iloc[0].startswith(TOPICS[0][0])
    model = save_tiny_policybert(tmp_path / "ft", seed=7)
    out = tmp_path / "out"
    assert main(["--questions", str(questions), "--pool", str(pool), "--model", str(model), "--out", str(out)]) == 0
    table = pd.read_parquet(out / "qa_eval.parquet")
    systems = {"bm25", "dense:finetuned", "hybrid:finetuned", "dense:untrained", "hybrid:untrained"}
    assert set(table["system"]) == systems and set(table["query_set"]) == {"questions", "mined"}
    t = table.set_index(["query_set", "system"])
    assert t.loc[("questions", "bm25"), "queries"] == len(p) == 24
    assert t.loc[("questions", "bm25"), "recall@10"] >= 0.9  # the questions name their article's topic words
    for s in ("finetuned", "untrained"):  # the fit never loses to the better part on the mined queries
        obj = lambda n: t.loc[("mined", n), "recall@10"] + t.loc[("mined", n), "mrr@10"]  # noqa: E731
        assert obj(f"hybrid:{s}") >= max(obj("bm25"), obj(f"dense:{s}")) - 1e-9
    assert len(list((out / "cache").glob("*.npy"))) == 4  # pool and masked-pool vectors cached per model
    assert "hybrid:finetuned" in capsys.readouterr().out
    assert main(["--questions", str(questions), "--pool", str(tmp_path / "missing.jsonl"), "--model", str(model)]) == 2


def test_qa_eval_tunes_the_query_side_cross_fitted(tmp_path):
    """``--tune-queries`` on the evaluated questions themselves: every question is reported once, by a fold
    that did not train on it; a documents pool (doc_id, text, title) is chunked with titles; convex fusion."""
    from flows.qa_eval import main
    from evaluation.sets import read_questions as load_questions
    from retrieval.qa_eval import load_pool
    from tests.retrieval_builders import policy_docs, save_tiny_bert

    docs = policy_docs().assign(text=lambda d: d["text"] * 2)  # ~1,300 chars: two chunks each
    pool = tmp_path / "docs.jsonl"
    docs[["doc_id", "title", "text"]].to_json(pool, orient="records", lines=True, force_ascii=False)
    qs = [{"qid": f"q{i}-{j}", "question": f"{part}应该怎么做？", "doc_id": f"d{i}"}
          for i, (_, _, detail) in enumerate(TOPICS) for j, part in enumerate(detail.split("、"))]
    questions = tmp_path / "q.jsonl"
    questions.write_text("\n".join(json.dumps(q, ensure_ascii=False) for q in qs), encoding="utf-8")
    p = load_pool(pool)
    assert len(p) > len(docs) and all(t.startswith(ti) for t, ti in zip(p["text"], p["title"]))
    assert load_questions(questions)["gold"].iloc[0] == ["d0"]
    model = save_tiny_bert(tmp_path / "bert", seed=2)
    out = tmp_path / "out"
    args = ["--questions", str(questions), "--pool", str(pool), "--model", str(model), "--out", str(out),
            "--no-untrained", "--tune-queries", str(questions), "--tune-folds", "3", "--tune-steps", "4",
            "--fusion", "convex"]
    assert main(args) == 0
    t = pd.read_parquet(out / "qa_eval.parquet").set_index(["query_set", "system"])
    assert t.loc[("questions", "dense:tuned-finetuned"), "queries"] == len(qs)
    assert t.loc[("questions", "hybrid:tuned-finetuned"), "queries"] == len(qs)
    info = json.loads((out / "qa_eval.json").read_text())
    folds = info["info"]["query_tuning:finetuned"]["folds"]
    assert len(folds) == 3 and sum(f["test"] for f in folds) == len(qs)
    assert info["config"]["fusion"]["method"] == "convex"
    assert len(list((out / "cache").glob("query-tuned-*"))) == 3
    assert main(args[:-2] + ["--fusion", "rrf"]) == 0  # the tuned folds are reused, not trained again
    assert main(args[:-6] + ["--tune-folds", "1"]) == 2  # cross-fitting the same questions needs >= 2 folds
