"""Load-time trust of an index version (SPEC §7, §9; :mod:`retrieval.verify`): every file of a version is
checked as serving loads it (core files and parts against their sha256, parts' provenance against the
version's identity, finite vectors, the manifest's shape), ``flows.serve`` refuses to start on a damaged
version and ``flows.versions rollback`` refuses to switch to one, each with one ``error:`` line and exit 2."""
from __future__ import annotations

import json
import shutil

import numpy as np
import pytest

from retrieval.verify import verify_version


@pytest.fixture(scope="module")
def built(tmp_path_factory):
    """``data`` with ``index/v1`` (tiny PolicyBERT, BM25 side, texts and a fitted answer scorer) published
    as the pipeline publishes it."""
    from retrieval.sparse import make_tokenizer
    from tests.answer_builders import build_data_dir

    return build_data_dir(tmp_path_factory.mktemp("versions"), make_tokenizer("auto"))


@pytest.fixture
def data(built, tmp_path):
    """A private copy of the built data dir (the tests damage it)."""
    out = tmp_path / "data"
    shutil.copytree(built, out, symlinks=True)
    return out


def _manifest(data, v="v1"):
    return json.loads((data / "index" / v / "manifest.json").read_text())


def _write_manifest(data, man, v="v1"):
    (data / "index" / v / "manifest.json").write_text(json.dumps(man))


def _rehash(data, rel, v="v1"):
    """Record the current sha256 of core file ``rel`` in the manifest (a forger who updates the hash too)."""
    from storage.hashing import file_sha256

    man = _manifest(data, v)
    man["core_files"][rel] = file_sha256(data / "index" / v / rel)
    _write_manifest(data, man, v)


def test_a_published_version_records_and_verifies_every_file(data):
    man = _manifest(data)
    core = man["core_files"]
    assert {"index.faiss", "chunks.parquet", "embeddings.npy"} <= set(core)
    assert any(k.startswith(man["sparse"]["dir"] + "/") for k in core)
    rep = verify_version(data / "index", "v1")
    assert rep.ok, rep.problems
    assert "encoder" in rep.checked and "part answer_scorer" in rep.checked and "part texts" in rep.checked
    assert rep.unverified == []


@pytest.mark.parametrize("rel", ["chunks.parquet", "embeddings.npy", "index.faiss"])
def test_a_changed_core_file_is_refused(data, rel):
    path = data / "index" / "v1" / rel
    path.write_bytes(path.read_bytes() + b"\0")
    rep = verify_version(data / "index", "v1")
    assert not rep.ok and f"core file {rel} changed" in " ".join(rep.problems)


def test_nan_vectors_are_refused_even_with_their_hash_rewritten(data):
    path = data / "index" / "v1" / "embeddings.npy"
    vecs = np.load(path)
    vecs[3, 0] = np.nan
    np.save(path, vecs)
    _rehash(data, "embeddings.npy")
    rep = verify_version(data / "index", "v1")
    assert rep.problems == ["embeddings.npy row 3 is not finite (NaN or inf): rebuild the version"]


def test_a_version_published_before_core_hashes_says_what_is_not_verified(data):
    man = _manifest(data)
    del man["core_files"]
    _write_manifest(data, man)
    rep = verify_version(data / "index", "v1")
    assert rep.ok and rep.unverified and "core files" in rep.unverified[0]
    assert "not recorded: core files" in rep.summary()


def test_a_scorer_for_another_encoder_with_its_hash_rewritten_is_refused_at_load(data):
    from storage.hashing import file_sha256

    vdir = data / "index" / "v1"
    scorer = vdir / "answer-scorer.json"
    d = json.loads(scorer.read_text())
    d["info"]["provenance"]["encoder_model_id"] = "another-encoder"
    scorer.write_text(json.dumps(d))
    man = _manifest(data)
    man["parts"]["answer_scorer"].update(sha256=file_sha256(scorer), provenance=d["info"]["provenance"])
    _write_manifest(data, man)
    rep = verify_version(data / "index", "v1")
    assert not rep.ok and "answer_scorer was fitted with another encoder_model_id 'another-encoder'" in rep.problems[0]


BAD_PARTS = {"list": ([], "field parts is [], not an object"),
             "record": ({"texts": "x"}, "field parts.texts is \"x\", not an object"),
             "file": ({"texts": {"file": 7, "sha256": "0"}}, "field parts.texts.file is 7"),
             "file-climbs": ({"texts": {"file": "../x", "sha256": "0"}}, "field parts.texts.file"),
             "files": ({"texts": {"file": "texts.parquet", "sha256": "0", "files": []}}, "field parts.texts.files")}


@pytest.mark.parametrize("name", sorted(BAD_PARTS))
def test_a_parts_field_of_the_wrong_shape_is_one_error_line_in_every_cli(data, capsys, name):
    from flows import ask, search, serve, versions

    parts, message = BAD_PARTS[name]
    _write_manifest(data, {**_manifest(data), "parts": parts})
    assert not verify_version(data / "index", "v1").ok
    d = str(data)
    for cli, argv in ((search.main, ["数据要素", "--data-dir", d]), (ask.main, ["数据要素是什么？", "--data-dir", d]),
                      (serve.main, ["--data-dir", d]), (versions.main, ["rollback", "v1", "--data-dir", d])):
        code = cli(argv)
        err = capsys.readouterr().err
        assert code == 2 and err.startswith("error: ") and message in err and len(err.splitlines()) == 1, (cli, err)
    assert versions.main(["list", "--data-dir", d]) == 0
    assert message in json.loads(capsys.readouterr().out)["error"]


def test_serve_refuses_a_changed_part_or_encoder_with_one_line(data, capsys):
    from flows import serve

    scorer = data / "index" / "v1" / "answer-scorer.json"
    scorer.write_text(scorer.read_text() + " ")
    assert serve.main(["--data-dir", str(data)]) == 2
    err = capsys.readouterr().err
    assert len(err.splitlines()) == 1 and "answer_scorer file answer-scorer.json changed" in err
    scorer.write_text(scorer.read_text()[:-1])
    enc = data / "index" / _manifest(data)["encoder_dir"]
    weights = next(p for p in sorted(enc.iterdir()) if p.suffix in (".safetensors", ".bin"))
    weights.write_bytes(weights.read_bytes()[:-1] + b"\1")
    assert serve.main(["--data-dir", str(data)]) == 2
    err = capsys.readouterr().err
    assert err.startswith("error: ") and len(err.splitlines()) == 1 and "model_id" in err


@pytest.mark.slow
def test_rollback_refuses_a_damaged_version_and_list_shows_verification(data, capsys):
    from flows import versions
    from retrieval.versions import current_version
    from tests.answer_builders import publish
    from retrieval.sparse import make_tokenizer

    publish(data, data.parent / "ckpt", make_tokenizer("auto"))
    capsys.readouterr()
    assert current_version(data / "index") == "v2"
    chunks = data / "index" / "v1" / "chunks.parquet"
    chunks.write_bytes(chunks.read_bytes()[:-8])
    assert versions.main(["rollback", "v1", "--data-dir", str(data)]) == 2
    out = capsys.readouterr()
    assert out.out == "" and out.err.startswith("error: index v1: core file chunks.parquet") and \
        len(out.err.splitlines()) == 1
    assert current_version(data / "index") == "v2"
    assert versions.main(["list", "--data-dir", str(data), "--verify"]) == 0
    rows = [json.loads(line) for line in capsys.readouterr().out.splitlines()]
    assert rows[0]["verified"].startswith("index v1: core file chunks.parquet") and rows[1]["verified"] == "verified"
