"""The related part trained on a user's pair file when no related corpus is configured (SPEC §12; the ``tiny``
profile, or a missing default corpus file): the index publication fits it on the pairs (whose documents are all
in the version) and publishes; it once failed with a TypeError while computing the default set's cache key.
Then hostile input to what serves it: pair and question files with a byte order mark, a line nested 200k deep,
a 50 MB id, non-finite vectors, a model file claiming huge sizes."""
from __future__ import annotations

import json
import shutil

import numpy as np
import pytest

from retrieval.chunks import ChunkConfig


def _pairs_lines():
    return [{"a": f"d{i}", "b": f"d{(i + s) % 8}", "label": int(s == 1)} for i in range(8) for s in (1, 2, 3)]


@pytest.fixture(scope="module")
def published(tmp_path_factory):
    """(data dir, pair file, index_publish_stage's result): the 8 policy documents, tiny PolicyBERT, the
    related part trained on a pair file (with a BOM) and no corpus."""
    from answers.stages import index_publish_stage
    from retrieval.sparse import make_tokenizer
    from retrieval.stages import index_embed_part_stage, index_plan_stage
    from tests.retrieval_builders import policy_docs, save_tiny_policybert, write_clean

    tmp = tmp_path_factory.mktemp("related-pairs")
    data = tmp / "data"
    clean = write_clean(policy_docs(), data / "documents_clean")
    ckpt = save_tiny_policybert(tmp / "ckpt", seed=1)
    cfg = ChunkConfig(max_chars=120, overlap=30)
    index_plan_stage(clean, ckpt, data / "index", cfg)
    index_embed_part_stage(ckpt, data / "index", 0, 1)
    pairs = tmp / "pairs.jsonl"
    pairs.write_text("\ufeff" + "\n".join(json.dumps(x) for x in _pairs_lines()) + "\n", encoding="utf-8")
    out = index_publish_stage(clean, ckpt, data / "index", cfg, tokenizer=make_tokenizer("auto"),
                              related_pairs=str(pairs), related_corpus="")
    return data, pairs, out


@pytest.fixture
def data(published, tmp_path):
    out = tmp_path / "data"
    shutil.copytree(published[0], out, symlinks=True)
    return out


def test_index_publish_trains_related_on_given_pairs_without_a_corpus(published):
    from retrieval.verify import verify_version
    from retrieval.versions import read_manifest

    data, pairs, out = published
    rec = read_manifest(data / "index", out["version"])["parts"]["related"]
    assert "refused" not in rec and rec["pairs"] == str(pairs) and rec["figures"]["pairs"] == len(_pairs_lines())
    assert verify_version(data / "index", out["version"]).ok


def _related(argv, capsys):
    from flows.related import main

    code = main(argv)
    return code, capsys.readouterr()


def test_pairs_cli_reads_a_bom_and_refuses_deep_lines_and_huge_ids_in_one_short_line(published, tmp_path, capsys):
    data, pairs, _ = published
    code, out = _related(["--pairs", str(pairs), "--data-dir", str(data)], capsys)
    rows = [json.loads(x) for x in out.out.splitlines()]
    assert code == 0 and len(rows) == len(_pairs_lines()) and all(np.isfinite(r["score"]) for r in rows)
    deep = tmp_path / "deep.jsonl"
    deep.write_text('{"a": "d0", "b": "d1"}\n' + "[" * 200_000 + "]" * 200_000 + "\n")
    code, out = _related(["--pairs", str(deep), "--data-dir", str(data)], capsys)
    assert code == 2 and out.err == f"error: {deep}:2: not a JSON line (or nested too deep)\n"
    huge = tmp_path / "huge.jsonl"
    huge.write_text(json.dumps({"a": "x" * (50 << 20), "b": "d1"}) + "\n")
    code, out = _related(["--pairs", str(huge), "--data-dir", str(data)], capsys)
    assert code == 2 and len(out.err) < 300 and "52,428,800 chars" in out.err, out.err[:300]


def test_pair_and_question_readers_accept_a_bom(tmp_path):
    from answers.ncpqa import read_question_lines
    from docmatch.pairs import read_pairs
    from evaluation.sets import read_questions

    q = tmp_path / "q.jsonl"
    q.write_text("\ufeff" + json.dumps({"qid": 1, "question": "什么？", "doc_id": "d0"}) + "\n", encoding="utf-8")
    assert list(read_question_lines(q)["qid"]) == ["1"] and read_questions(q)["gold"].tolist() == [["d0"]]
    p = tmp_path / "p.jsonl"
    p.write_text("\ufeff" + json.dumps({"a": "d0", "b": "d1", "label": 1}) + "\n", encoding="utf-8")
    assert read_pairs(p)[["a", "b"]].values.tolist() == [["d0", "d1"]]
    q.write_text("[" * 200_000 + "]" * 200_000 + "\n")
    with pytest.raises(ValueError, match="is not JSON Lines"):
        read_question_lines(q)


def test_non_finite_vectors_are_one_error_not_invalid_json(data, capsys):
    from retrieval.verify import verify_version

    path = next((data / "index").glob("v*")) / "embeddings.npy"
    vecs = np.load(path)
    vecs[0, :] = np.inf
    np.save(path, vecs)
    code, out = _related(["d1", "--data-dir", str(data)], capsys)
    assert code == 2 and out.out == "" and "not finite" in out.err and len(out.err.splitlines()) == 1
    assert not verify_version(data / "index", path.parent.name).ok


def test_a_model_file_claiming_huge_sizes_is_refused_before_allocating(data, capsys):
    import tracemalloc

    from docmatch.ltm import from_json
    from storage.hashing import file_sha256

    vdir = next((data / "index").glob("v*"))
    part = vdir / "related.json"
    d = json.loads(part.read_text())
    for change, message in (({"dim": 1 << 16}, "config dim is 65536"), ({"hidden": 1 << 14}, "config hidden"),
                            ({"hidden": d["config"]["hidden"] * 2}, "weights do not fit the config"),
                            ({"colour": 1}, "unknown field")):
        text = json.dumps({**d, "config": {**d["config"], **change}})
        tracemalloc.start()
        with pytest.raises(ValueError, match=message):
            from_json(text, "related.json")
        peak = tracemalloc.get_traced_memory()[1]
        tracemalloc.stop()
        assert peak < 64 << 20, (change, peak)
    part.write_text(json.dumps({**d, "config": {**d["config"], "dim": 1 << 16, "hidden": 1 << 14}}))
    man = json.loads((vdir / "manifest.json").read_text())
    man["parts"]["related"]["sha256"] = file_sha256(part)  # a forger who rewrites the hash too
    (vdir / "manifest.json").write_text(json.dumps(man))
    code, out = _related(["d1", "--data-dir", str(data)], capsys)
    assert code == 2 and "config dim is 65536" in out.err and len(out.err.splitlines()) == 1
