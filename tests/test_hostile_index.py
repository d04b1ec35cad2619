"""Hostile or broken index versions (SPEC §7): a forged ``index.faiss`` header is refused before FAISS sizes
anything from it, a manifest of the wrong shape is refused naming the field, both are one ``error:`` line from
``flows.search``; a version rebuilt under the same name is a new version for the caches of loaded versions."""
from __future__ import annotations

import json
import struct
import subprocess
import sys
import time

import faiss
import numpy as np
import pandas as pd
import pytest

from retrieval.dense import IndexConfig, build_index
from retrieval.versions import (IndexLoadError, ManifestFieldError, check_faiss_file, load_version,
                                publish_version, version_key)
from tests.conftest import REPO

DIM = 8


def _vectors(n: int, seed: int = 0) -> tuple[np.ndarray, np.ndarray]:
    rng = np.random.default_rng(seed)
    vecs = rng.normal(size=(n, DIM)).astype(np.float32)
    vecs /= np.linalg.norm(vecs, axis=1, keepdims=True)
    return vecs, np.arange(n, dtype=np.int64) * 11 + 5


def _publish(data, n: int = 6, kind: str = "flat", seed: int = 0, manifest: dict | None = None):
    """A version ``vN`` under ``data/index`` with the manifest fields the pipeline writes (tiny flat index)."""
    vecs, ids = _vectors(n, seed)
    root = data / "index"
    chunks = pd.DataFrame({"chunk_id": ids, "doc_id": [f"d{i}" for i in range(n)], "text": ["文本"] * n})
    man = {"model_id": "m1", "encoder_dir": "models/m1", "model_dir": "../ckpt", "dim": DIM,
           "ann": {"kind": kind, "tombstones": 0},
           "fusion": {"w_dense": 0.4, "w_sparse": 0.6, "rrf_k": 60, "depth": 100, "method": "rrf"},
           **(manifest or {})}
    index = build_index(vecs, ids, IndexConfig(kind=kind, hnsw_m=4, nlist=2))
    return root, publish_version(root, index, chunks, man, vecs)


def _search(data, capsys) -> tuple[int, str]:
    from flows.search import main

    code = main(["数据安全", "--data-dir", str(data)])
    return code, capsys.readouterr().err


def _flat_header(fourcc: bytes, d: int, ntotal: int) -> bytes:
    """What ``faiss.write_index`` writes before a flat index's vectors (faiss/impl/index_read.cpp
    ``read_index_header``): d int32, ntotal int64, two unused int64, is_trained, metric (0: inner product)."""
    return fourcc + struct.pack("<iqqqBi", d, ntotal, 1 << 20, 1 << 20, 1, 0)


def forged_flat(ntotal: int, d: int = 384) -> bytes:
    """A 61-byte IndexFlatIP whose header and vector count claim ``ntotal * d`` floats; 16 bytes follow."""
    return _flat_header(b"IxFI", d, ntotal) + struct.pack("<Q", ntotal * d) + bytes(16)


# -- the FAISS file ---------------------------------------------------------------------------------------

@pytest.mark.parametrize("kind", ["flat", "hnsw", "ivf"])
def test_real_indexes_of_every_kind_pass_the_check_and_load(tmp_path, kind):
    root, v = _publish(tmp_path, n=120, kind=kind)
    shape = check_faiss_file(root / v / "index.faiss")
    assert (shape.kind, shape.d, shape.ntotal) == (kind, DIM, 120)
    index, chunks, manifest = load_version(root)
    vecs, ids = _vectors(120)
    _, found = index.search(vecs[:3], 1)
    assert index.ntotal == 120 and found[:, 0].tolist() == ids[:3].tolist()


@pytest.mark.parametrize("ntotal", [2_000_000, 100_000_000])  # 3 GB and 153 GB of declared vectors
def test_forged_flat_header_is_refused_before_faiss_reads_it(tmp_path, capsys, ntotal):
    root, v = _publish(tmp_path / "data")
    path = root / v / "index.faiss"
    path.write_bytes(forged_flat(ntotal))
    assert path.stat().st_size == 61
    t = time.perf_counter()
    with pytest.raises(IndexLoadError, match=r"index\.faiss: .*declares [\d,]+ bytes.*truncated or forged"):
        load_version(root)
    assert time.perf_counter() - t < 1.0
    code, err = _search(tmp_path / "data", capsys)
    assert code == 2 and err.startswith("error: ") and "forged" in err and len(err.splitlines()) == 1


def test_forged_headers_never_allocate_what_they_claim(tmp_path):
    """In a fresh process (its peak RSS is the check's, not the test session's): three forged files claiming
    3 GB, 153 GB and 3 GB behind an ID map are refused with a peak far below what they claim."""
    root, v = _publish(tmp_path / "data")
    inner = forged_flat(2_000_000)
    variants = {"flat3g": forged_flat(2_000_000), "flat153g": forged_flat(100_000_000),
                "idmap": _flat_header(b"IxM2", 384, 2_000_000) + inner}
    script = f"""
import resource, shutil, sys
from pathlib import Path
sys.path.insert(0, {str(REPO)!r})
from retrieval.versions import IndexLoadError, load_version
root = Path({str(root)!r})
for name, blob in {variants!r}.items():
    (root / {v!r} / "index.faiss").write_bytes(blob)
    try:
        load_version(root)
        print(name, "LOADED")
    except IndexLoadError:
        print(name, "refused")
# VmHWM: this process image's own high-water mark (ru_maxrss would carry the forking test session's size)
hwm = [line.split()[1] for line in open("/proc/self/status") if line.startswith("VmHWM:")]
print("peak_kib", hwm[0] if hwm else resource.getrusage(resource.RUSAGE_SELF).ru_maxrss)
"""
    out = subprocess.run([sys.executable, "-c", script], capture_output=True, text=True, timeout=120)
    assert out.returncode == 0, out.stderr[-2000:]
    lines = dict(line.split() for line in out.stdout.splitlines())
    assert [lines[k] for k in variants] == ["refused"] * 3
    assert int(lines["peak_kib"]) < 1_000_000  # < 1 GB against the 3 GB the smallest one claims


def test_every_truncation_and_trailing_bytes_are_refused(tmp_path):
    for kind in ("flat", "hnsw", "ivf"):
        root, v = _publish(tmp_path / kind, n=80, kind=kind)
        path = root / v / "index.faiss"
        blob = path.read_bytes()
        for cut in sorted({*range(0, 200), *range(200, len(blob), max(1, len(blob) // 300)), len(blob) - 1}):
            path.write_bytes(blob[:cut])
            with pytest.raises(IndexLoadError):
                check_faiss_file(path)
        path.write_bytes(blob + b"\0" * 8)
        with pytest.raises(IndexLoadError, match="after the end of the index"):
            check_faiss_file(path)


def test_inconsistent_or_foreign_faiss_files_are_refused(tmp_path):
    root, v = _publish(tmp_path, n=50, kind="hnsw")
    path = root / v / "index.faiss"
    blob = bytearray(path.read_bytes())
    # an HNSW link pointing past the graph would be read out of bounds at search time
    pos = 37 + 37  # ID map header, HNSW header; then the graph's arrays, each a uint64 count and its elements
    for itemsize in (8, 4, 4, 8):  # level probabilities, neighbours per level, levels, offsets
        pos += 8 + itemsize * struct.unpack_from("<Q", blob, pos)[0]
    bad = blob.copy()
    bad[pos + 8 + 4:pos + 8 + 8] = struct.pack("<i", 10_000)  # the first node's second neighbour
    path.write_bytes(bytes(bad))
    with pytest.raises(IndexLoadError, match="outside its vectors"):
        load_version(root)
    # an ID map holding fewer ids than vectors; a flat index with the vector count of another dimension
    flat_idmap = faiss.serialize_index(build_index(*_vectors(4))).tobytes()
    path.write_bytes(flat_idmap[:-8 * 4 - 8] + struct.pack("<Q", 3) + flat_idmap[-8 * 3:])
    with pytest.raises(IndexLoadError, match="id map holds 3 ids for 4 vectors"):
        check_faiss_file(path)
    path.write_bytes(_flat_header(b"IxFI", 384, 2) + struct.pack("<Q", 8) + bytes(32))
    with pytest.raises(IndexLoadError, match="stores 8 floats for 2 vectors of dimension 384"):
        check_faiss_file(path)
    # a type this project does not write (a product quantizer) and a zero dimension
    faiss.write_index(faiss.IndexPQ(DIM, 2, 4), str(path))
    with pytest.raises(IndexLoadError, match="type 'IxPq'"):
        check_faiss_file(path)
    path.write_bytes(_flat_header(b"IxFI", 0, 0) + struct.pack("<Q", 0))
    with pytest.raises(IndexLoadError, match="d = 0"):
        check_faiss_file(path)


def test_an_index_of_another_version_is_refused_by_the_manifest(tmp_path):
    root, v1 = _publish(tmp_path, n=6)
    _, v2 = _publish(tmp_path, n=9, seed=1)
    (root / v1 / "index.faiss").write_bytes((root / v2 / "index.faiss").read_bytes())
    with pytest.raises(IndexLoadError, match="9 live vectors, the manifest records size 6"):
        load_version(root, v1)


# -- the manifest -------------------------------------------------------------------------------------------

BAD_MANIFESTS = {
    "fusion": ({"fusion": "x"}, "field fusion is \"x\", not an object"),
    "fusion.w_dense": ({"fusion": {"w_dense": "0.5"}}, "field fusion.w_dense is \"0.5\", not a number in"),
    "fusion.w_dense-range": ({"fusion": {"w_dense": 1.5}}, "field fusion.w_dense is 1.5"),
    "fusion.w_dense-nan": ({"fusion": {"w_dense": float("nan")}}, "field fusion.w_dense is NaN"),
    "fusion.w_dense-missing": ({"fusion": {"rrf_k": 60}}, "no field fusion.w_dense"),
    "fusion.rrf_k": ({"fusion": {"w_dense": 0.5, "rrf_k": "60"}}, "field fusion.rrf_k"),
    "fusion.depth": ({"fusion": {"w_dense": 0.5, "depth": 0}}, "field fusion.depth is 0"),
    "fusion.method": ({"fusion": {"w_dense": 0.5, "method": "max"}}, "field fusion.method"),
    "sparse": ({"sparse": "x"}, "field sparse is \"x\", not an object"),
    "sparse.dir-missing": ({"sparse": {"backend": "jieba"}}, "no field sparse.dir"),
    "sparse.dir-climbs": ({"sparse": {"dir": "../../etc"}}, "field sparse.dir"),
    "encoder_dir": ({"encoder_dir": "/etc"}, "field encoder_dir is \"/etc\""),
    "encoder_dir-climbs": ({"encoder_dir": "models/../../x"}, "field encoder_dir"),
    "model_id": ({"model_id": 7}, "field model_id is 7"),
    "dim": ({"dim": 4}, "dimension 8, the manifest records dim 4"),
    "ann": ({"ann": []}, "field ann is [], not an object"),
    "ann.tombstones": ({"ann": {"tombstones": -1}}, "field ann.tombstones"),
}


@pytest.mark.parametrize("name", sorted(BAD_MANIFESTS))
def test_a_manifest_of_the_wrong_shape_is_refused_naming_the_field(tmp_path, capsys, name):
    change, message = BAD_MANIFESTS[name]
    root, v = _publish(tmp_path / "data")
    path = root / v / "manifest.json"
    path.write_text(json.dumps({**json.loads(path.read_text()), **change}))
    with pytest.raises(IndexLoadError) as err:
        load_version(root)
    assert str(err.value).startswith(f"{root / v}/") and message in str(err.value)
    code, out = _search(tmp_path / "data", capsys)
    assert code == 2 and out == f"error: {err.value}\n"


@pytest.mark.parametrize("drop,field", [(("model_id",), "model_id"), (("encoder_dir", "model_dir"), "model_dir")])
def test_a_missing_encoder_field_is_one_error_naming_it(tmp_path, capsys, drop, field):
    """A version without the fields naming its encoder loads as data (a bare version has none), and the search,
    which needs them, stops at the first one missing with an error naming it."""
    root, v = _publish(tmp_path / "data")
    path = root / v / "manifest.json"
    path.write_text(json.dumps({k: x for k, x in json.loads(path.read_text()).items() if k not in drop}))
    _, _, manifest = load_version(root)
    with pytest.raises(ManifestFieldError, match=f"manifest.json: no field {field} ") as err:
        manifest[field]
    assert isinstance(err.value, KeyError) and str(err.value).startswith(str(path))
    with pytest.raises(ManifestFieldError, match="no field fusion.convex_scale"):
        manifest["fusion"]["convex_scale"]
    code, out = _search(tmp_path / "data", capsys)
    assert code == 2 and out.startswith("error: ") and f"no field {field}" in out and len(out.splitlines()) == 1


# -- a version rebuilt under the same name ------------------------------------------------------------------

def test_a_rebuilt_version_has_another_key_and_is_loaded_again(tmp_path, monkeypatch):
    import shutil

    import answers.backend as backend_mod
    from answers.answer import Answerer

    data = tmp_path / "data"
    root, v = _publish(data, n=6)
    key = version_key(root, v)
    assert key == version_key(root, v) and key.startswith("v1:")
    loads = []

    class Loaded:  # what the Answerer caches: records which version content it was built from
        def __init__(self, index_root, version=None, tokenizer=None, **_):
            self.version = version
            self.size = load_version(index_root, version)[0].ntotal
            loads.append((version, self.size))

    monkeypatch.setattr(backend_mod, "SearchBackend", Loaded)
    answerer = Answerer(data)
    first = answerer.backend()
    assert answerer.backend() is first and first.size == 6 and loads == [("v1", 6)]
    shutil.rmtree(root)  # rebuilt from scratch while serving: v1 again, with other content
    _, v_again = _publish(data, n=9, seed=1)
    assert v_again == "v1" and version_key(root, "v1") != key
    again = answerer.backend()
    assert again is not first and again.size == 9 and loads == [("v1", 6), ("v1", 9)]
    # the same inputs rebuilt again: the same manifest but for its random build id, so still another version
    before = version_key(root, "v1")
    shutil.rmtree(root)
    _publish(data, n=9, seed=1)
    assert version_key(root, "v1") != before and answerer.backend() is not again and len(loads) == 3
    with pytest.raises(FileNotFoundError, match="v7 not found"):
        version_key(root, "v7")
    with pytest.raises(IndexLoadError):
        version_key(root, "../v1")


def test_retention_keeps_the_encoders_when_a_kept_manifest_is_refused(tmp_path):
    from retrieval.versions import pin_version, retire_versions

    root, v1 = _publish(tmp_path, manifest={"encoder_dir": "models/old"})
    for mid in ("old", "new", "unused"):
        (root / "models" / mid).mkdir(parents=True)
    _publish(tmp_path, manifest={"encoder_dir": "models/new"})
    pin_version(root, v1)
    path = root / v1 / "manifest.json"
    path.write_text(json.dumps({**json.loads(path.read_text()), "fusion": "x"}))
    assert retire_versions(root, keep=1)["encoders_removed"] == []
    path.write_text(json.dumps({**json.loads(path.read_text()), "fusion": {"w_dense": 0.5}}))
    assert retire_versions(root, keep=1)["encoders_removed"] == ["unused"]
