"""Pinned encoders per index version, the sparse (BM25) side and hybrid search."""
import json
import shutil

import numpy as np
import pandas as pd
import pytest

from retrieval.chunks import ChunkConfig
from retrieval.fusion import FusionConfig, fit_fusion, fuse
from retrieval.metrics import doc_metrics
from retrieval.mining import mine_queries
from retrieval.term_counts import TermCounts
from tests.retrieval_builders import TOPICS, policy_docs, save_tiny_policybert, write_clean

CHUNKS = ChunkConfig(max_chars=120, overlap=30)


@pytest.fixture(scope="module")
def tok():
    """The segmenter, loaded once for the module (index builds and retrievers check its identity)."""
    from retrieval.sparse import make_tokenizer

    return make_tokenizer("auto")


def _rankings(r, queries, mode):
    return [[h.doc_id for h in r.search(q, 5, mode=mode)] for q in queries]


def test_model_id_covers_every_weight_format_and_config(tmp_path):
    from retrieval.pinning import model_id

    d = tmp_path / "m"
    d.mkdir()
    (d / "pytorch_model.bin").write_bytes(b"weights-a")
    (d / "config.json").write_text('{"hidden_size": 32}')
    (d / "metrics.json").write_text("{}")
    a = model_id(d)
    (d / "metrics.json").write_text('{"acc": 1}')  # not part of the encoder
    assert model_id(d) == a
    (d / "config.json").write_text('{"hidden_size": 64}')
    b = model_id(d)
    (d / "extra.pt").write_bytes(b"more")
    c = model_id(d)
    (d / "pytorch_model.bin").write_bytes(b"weights-b")
    assert len({a, b, c, model_id(d)}) == 4
    empty = tmp_path / "empty"
    empty.mkdir()
    with pytest.raises(FileNotFoundError):
        model_id(empty)


def test_rollback_embeds_queries_with_the_pinned_encoder(tmp_path, tok):
    from retrieval.pinning import EncoderMismatchError
    from retrieval.retrievers import Retriever
    from retrieval.stages import index_stage

    clean = write_clean(policy_docs(), tmp_path / "clean")
    ckpt, root = tmp_path / "models" / "finetune", tmp_path / "index"
    save_tiny_policybert(ckpt, seed=1)
    s1 = index_stage(clean, ckpt, root, CHUNKS, tokenizer=tok)
    queries = ["数据要素流通和交易制度", "职业院校办学条件", "耕地保护和农民增收"]
    r1 = Retriever(root, tokenizer=tok)
    before = [[(h.chunk_id, round(h.dense_score, 5)) for h in r1.search(q, 5, mode="dense")] for q in queries]
    # a new fine-tune rewrites the same path with other weights; v2 is a full rebuild with model B
    shutil.rmtree(ckpt)
    save_tiny_policybert(ckpt, seed=2)
    s2 = index_stage(clean, ckpt, root, CHUNKS, tokenizer=tok)
    m1 = json.loads((root / "v1" / "manifest.json").read_text())
    m2 = json.loads((root / "v2" / "manifest.json").read_text())
    assert s2["full_rebuild"] and m1["model_id"] != m2["model_id"]
    assert (root / m1["encoder_dir"]).is_dir() and (root / m2["encoder_dir"]).is_dir()
    v2 = [[(h.chunk_id, round(h.dense_score, 5)) for h in Retriever(root, tokenizer=tok).search(q, 5, mode="dense")]
          for q in queries]
    assert v2 != before  # model B ranks/scores differently
    (root / "CURRENT").write_text("v1")  # rollback
    after = [[(h.chunk_id, round(h.dense_score, 5)) for h in Retriever(root, tokenizer=tok).search(q, 5, mode="dense")]
             for q in queries]
    assert after == before and s1["version"] == "v1"
    # a tampered pinned encoder is refused with a clear error
    weights = next((root / m1["encoder_dir"]).glob("*.safetensors"))
    data = bytearray(weights.read_bytes())
    data[-1] ^= 0xFF
    weights.write_bytes(bytes(data))
    with pytest.raises(EncoderMismatchError, match="refusing to serve"):
        Retriever(root, tokenizer=tok)


def test_fuse_ends_reproduce_each_side():
    dense, sparse = [5, 3, 9, 1], [3, 7, 5]
    assert [r for r, *_ in fuse(dense, sparse, 1.0)][:4] == dense
    assert [r for r, *_ in fuse(dense, sparse, 0.0)][:3] == sparse
    mixed = fuse(dense, sparse, 0.5)
    assert mixed[0][0] == 3 and mixed[0][2:] == (2, 1)  # ranks 2 and 1: best of both
    assert {r for r, *_ in mixed} == set(dense) | set(sparse)


def test_fit_never_loses_to_the_better_side_and_drops_a_useless_one():
    rng = np.random.default_rng(0)
    n_docs, n_q = 50, 40
    row_doc = [f"d{i}" for i in range(n_docs)]
    gold = [f"d{i}" for i in range(n_q)]
    sparse = [[i] + [int(x) for x in rng.permutation(n_docs) if x != i][:20] for i in range(n_q)]  # sparse: perfect
    dense = [[int(x) for x in rng.permutation(n_docs)][:20] for _ in range(n_q)]  # dense: random
    fit = fit_fusion(dense, sparse, row_doc, gold, FusionConfig(grid=10))
    assert fit["hybrid"]["recall@10"] >= max(fit["dense"]["recall@10"], fit["sparse"]["recall@10"]) == 1.0
    assert fit["w_dense"] < 0.5 and fit["hybrid"]["mrr@10"] == 1.0
    # complementary sides (each has the gold first for half the queries, second behind its own distractor for
    # the rest): fusion beats both, on the held-out guard queries too, and is kept
    a, b = list(range(n_docs, n_docs + 15)), list(range(n_docs + 15, n_docs + 30))
    dense2 = [[i] + a if i % 2 else [a[0], i] + a[1:] for i in range(n_q)]
    sparse2 = [[b[0], i] + b[1:] if i % 2 else [i] + b for i in range(n_q)]
    row_doc2 = row_doc + [f"x{j}" for j in range(30)]
    fit2 = fit_fusion(dense2, sparse2, row_doc2, gold, FusionConfig(grid=10))
    assert fit2["guard"]["decision"] == "fused" and 0 < fit2["w_dense"] < 1
    assert fit2["hybrid"]["recall@1"] == 1.0 > max(fit2["dense"]["recall@1"], fit2["sparse"]["recall@1"])


def _chunk_rankings(ckpt, docs, queries, depth=20):
    """(dense rows, sparse rows, chunk doc ids) of ``queries`` over the 120-char chunks of ``docs``: the
    checkpoint's encoder (cosine) and BM25 over character bigrams, each side's top ``depth``."""
    from docmatch.baselines import SparseBM25
    from retrieval.chunks import chunk_text
    from retrieval.encoders import Encoder

    texts, row_doc = [], []
    for d, t in zip(docs["doc_id"], docs["text"]):
        for s, e in chunk_text(t, CHUNKS):
            texts.append(t[s:e])
            row_doc.append(d)
    enc = Encoder.from_checkpoint(ckpt, 32, "cpu")
    dense_s = enc.encode_queries(queries) @ enc.encode_corpus(texts).T
    bm = SparseBM25(texts)
    top = lambda s: [int(r) for r in np.argsort(-s, kind="stable")[:depth]]  # noqa: E731
    return [top(s) for s in dense_s], [top(bm.scores(q)) for q in queries], row_doc


def test_fit_gives_no_weight_to_a_useless_dense_side_that_would_lower_recall(tmp_path):
    """Regression (the ``tiny`` profile over LawRefBook once fused a dense side at recall@1 0.02 with weight 0.4
    and fell below BM25): an untrained tiny encoder's ranking fused with BM25 over a small corpus; the fit's
    held-out guard keeps the fusion from lowering recall below BM25's, on the held-out queries and on all."""
    docs, fill = policy_docs(), "现就提出如下意见围绕完善的具体措施并抓好落实第项"  # words every document shares
    fills = [fill, fill[::-1], fill[8:] + fill[:8], fill[16:] + fill[:16]]
    queries = [f"{f}{topic}{f}" for _, topic, _ in TOPICS for f in fills]  # 32 known-item queries, 4 a document
    gold = [d for d in docs["doc_id"] for _ in fills]
    dense, sparse, row_doc = _chunk_rankings(save_tiny_policybert(tmp_path / "untrained", seed=5), docs, queries)
    fit = fit_fusion(dense, sparse, row_doc, gold, FusionConfig(grid=10))
    g = fit["guard"]
    assert g["held_out"] and g["queries"] == round(len(queries) * FusionConfig().guard_share)
    assert fit["dense"]["recall@1"] < 0.5 <= fit["sparse"]["recall@1"]
    kept = {"fused": g["fused"], "sparse": g["sparse"], "dense": g["dense"]}[g["decision"]]
    assert kept["recall@1"] >= g["sparse"]["recall@1"]
    assert fit["hybrid"]["recall@1"] >= fit["sparse"]["recall@1"]
    if g["decision"] != "fused":
        assert fit["w_dense"] == 0.0 and fit["hybrid"] == fit["sparse"]


def test_guard_falls_back_to_the_better_side_unless_fusion_beats_it():
    from retrieval.fusion import guard_weight

    m = lambda r1, mrr: {"recall@1": r1, "mrr@10": mrr}  # noqa: E731
    assert guard_weight(0.4, {0.0: m(0.47, 0.6), 1.0: m(0.02, 0.1), 0.4: m(0.33, 0.5)}) == (0.0, "sparse")
    assert guard_weight(0.4, {0.0: m(0.2, 0.3), 1.0: m(0.6, 0.7), 0.4: m(0.6, 0.7)}) == (1.0, "dense")
    assert guard_weight(0.4, {0.0: m(0.5, 0.6), 1.0: m(0.4, 0.5), 0.4: m(0.55, 0.7)}) == (0.4, "fused")
    assert guard_weight(0.4, {0.0: m(0.5, 0.6), 1.0: m(0.4, 0.5), 0.4: m(0.45, 0.9)}) == (0.0, "sparse")
    assert guard_weight(0.0, {0.0: m(0.5, 0.6), 1.0: m(0.5, 0.6)}) == (0.0, "sparse")  # a tie goes to BM25


def test_mined_queries_are_titles_and_leads():
    q = mine_queries(policy_docs())
    assert set(q["kind"]) == {"title", "lead"} and len(q) == 16
    assert q.loc[q.kind == "lead", "query"].iloc[0].startswith("为推进数据要素工作")
    assert doc_metrics([["a", "b"], ["c"]], [{"b", "z"}, "q"])["recall@5"] == 0.5


def test_sparse_side_hybrid_search_and_cheap_refresh(tmp_path, tok):
    from retrieval.retrievers import Retriever
    from retrieval.stages import index_stage

    ckpt, root = save_tiny_policybert(tmp_path / "ft", seed=3), tmp_path / "index"
    s1 = index_stage(write_clean(policy_docs(), tmp_path / "c1"), ckpt, root, CHUNKS, tokenizer=tok)
    man = json.loads((root / "v1" / "manifest.json").read_text())
    assert (root / "v1" / "sparse" / "counts.npz").is_file() and man["sparse"]["backend"]
    fit = man["fusion"]
    assert fit["fitted"] and fit["queries"] == 8  # lead queries only (titles are what the evaluation reports)
    assert len(fit["curve"]) == FusionConfig().grid + 1
    objective = lambda m: m["recall@10"] + m["mrr@10"]  # noqa: E731
    best = max(c[1] for c in fit["curve"])  # the grid's weight is its best, ties to the one nearest 0.5
    g = fit["guard"]  # 8 queries < guard_min: the guard checks the grid's own queries
    assert not g["held_out"] and g["queries"] == 8
    assert dict(map(tuple, fit["curve"]))[g["w_grid"]] == best
    assert g["w_grid"] == min((w for w, o in fit["curve"] if o == best), key=lambda w: abs(w - 0.5))
    kept = {"fused": g["w_grid"], "sparse": 0.0, "dense": 1.0}[g["decision"]]
    assert fit["w_dense"] == kept and fit["hybrid"]["recall@1"] >= fit["sparse"]["recall@1"]
    r = Retriever(root, tokenizer=tok)
    hits = r.search("养老服务体系和普惠托育", k=5)
    assert hits[0].doc_id == "d5" and hits[0].mode == "hybrid"
    w, rrf = fit["w_dense"], fit["rrf_k"]
    qv = r.encoder.encode_queries(["养老服务体系和普惠托育"])[0]
    for h in hits:  # the fused score is the weighted RRF of the two ranks; the dense score the stored cosine
        d, s = h.dense_rank, h.sparse_rank
        assert h.score == pytest.approx((w / (rrf + d) if d else 0) + ((1 - w) / (rrf + s) if s else 0))
        assert h.dense_score == pytest.approx(float(r.vectors[r.chunks.index[r.chunks.chunk_id == h.chunk_id][0]] @ qv),
                                                 abs=1e-5)
    assert [h.score for h in hits] == sorted((h.score for h in hits), reverse=True)
    sp = r.search("养老服务体系和普惠托育", k=5, mode="sparse")
    assert sp[0].doc_id == "d5" and sp[0].sparse_rank == 1 and sp[0].score == sp[0].sparse_score > 0
    assert [h.score for h in sp] == sorted((h.score for h in sp), reverse=True)
    titles = policy_docs()["title"].tolist()
    gold = policy_docs()["doc_id"].tolist()
    m = {mode: doc_metrics(_rankings(r, titles, mode), gold) for mode in ("dense", "sparse", "hybrid")}
    assert m["sparse"]["recall@5"] == 1.0 and m["hybrid"]["recall@5"] >= m["dense"]["recall@5"]
    # refresh after editing one document: only its changed chunks are tokenized and embedded
    s2 = index_stage(write_clean(policy_docs(edit=2), tmp_path / "c2"), ckpt, root, CHUNKS, tokenizer=tok)
    assert not s2["full_rebuild"] and 0 < s2["embedded"] == s2["sparse_tokenized"] < s1["chunks"] // 4
    assert s2["fusion_queries_embedded"] == 0  # titles and leads unchanged: their vectors are reused
    assert s1["fusion_masked_embedded"] == fit["masked_chunks"] == 8
    # the few chunks changed are within FusionConfig.refit_share: the weights and the fit's caches carry over
    fit2 = json.loads((root / "v2" / "manifest.json").read_text())["fusion"]
    assert not s2["fusion_refit"] and fit2["fitted_in"] == "v1" and fit2["w_dense"] == fit["w_dense"]
    assert 0 < fit2["changed_since_fit"] == pytest.approx((s2["embedded"] + s2["removed"]) / s2["chunks"], abs=1e-6)
    assert (root / "v2" / "fusion" / "masked.parquet").is_file()
    # refit on demand (refit_share 0): leads and masked chunks unchanged, nothing is embedded again
    s3 = index_stage(write_clean(policy_docs(edit=2), tmp_path / "c2"), ckpt, root, CHUNKS, tokenizer=tok,
                     fusion=FusionConfig(refit_share=0.0))
    assert s3["fusion_refit"] and s3["fusion_queries_embedded"] == 0 and s3["fusion_masked_embedded"] == 0
    c1, c2 = TermCounts.load(root / "v1" / "sparse"), TermCounts.load(root / "v2" / "sparse")
    bag = lambda c, k: {c.vocab[j]: int(n) for j, n in zip(c.counts[k].indices, c.counts[k].data)}  # noqa: E731
    row2 = {int(i): k for k, i in enumerate(c2.chunk_ids)}
    same = [(k, row2[int(i)]) for k, i in enumerate(c1.chunk_ids) if int(i) in row2]
    assert len(same) == s2["sparse_reused"] and all(bag(c1, a) == bag(c2, b) for a, b in same)
    hit = Retriever(root, tokenizer=tok).search("建立定期评估和督促检查机制", k=1, mode="sparse")[0]
    assert hit.doc_id == "d2" and "督促检查" in hit.text
    # what the refreshed version serves is what a full build of the same documents serves
    fresh = tmp_path / "fresh"
    index_stage(write_clean(policy_docs(edit=2), tmp_path / "c3"), ckpt, fresh, CHUNKS, tokenizer=tok)
    a, b = Retriever(root, tokenizer=tok), Retriever(fresh, tokenizer=tok)
    b.hybrid.w_dense = a.hybrid.w_dense
    for q in titles + ["建立定期评估和督促检查机制"]:
        for mode in ("sparse", "dense", "hybrid"):
            ha, hb = a.search(q, k=8, mode=mode), b.search(q, k=8, mode=mode)
            assert [(h.chunk_id, h.score) for h in ha] == [(h.chunk_id, h.score) for h in hb], (q, mode)


def test_search_cli_modes(tmp_path, capsys, tok):
    from flows.search import main
    from retrieval.stages import index_stage

    data = tmp_path / "data"
    ckpt = save_tiny_policybert(tmp_path / "ft", seed=4)
    index_stage(write_clean(policy_docs(), tmp_path / "c"), ckpt, data / "index", CHUNKS, tokenizer=tok)
    assert main(["乡村振兴战略", "--data-dir", str(data), "-k", "3", "--mode", "sparse"]) == 0
    lines = [json.loads(x) for x in capsys.readouterr().out.splitlines()]
    assert len(lines) == 3 and lines[0]["doc_id"] == "d7" and lines[0]["mode"] == "sparse"
    assert main(["乡村振兴战略", "--data-dir", str(data)]) == 0
    lines = [json.loads(x) for x in capsys.readouterr().out.splitlines()]
    assert len(lines) == 5 and {"dense_score", "sparse_rank"} <= set(lines[0])
    assert main(["x", "--data-dir", str(tmp_path / "nothing")]) == 2


def test_mapped_index_path_matches_one_process(tmp_path, tok):
    """The production path: a plan in its own staging folder, embedding parts in separate calls (any order)
    into their own files, a publish that takes the parts' records; same vectors and fit as one process."""
    from retrieval.stages import index_embed_part_stage, index_plan_stage, index_publish_stage, index_stage
    from storage.mapped import StalePlanError, part_record

    clean = write_clean(policy_docs(), tmp_path / "clean")
    ckpt = save_tiny_policybert(tmp_path / "ft", seed=6)
    one = index_stage(clean, ckpt, tmp_path / "one", CHUNKS, tokenizer=tok)
    root, staging = tmp_path / "mapped", tmp_path / "cache" / "plan-1"
    plan = index_plan_stage(clean, ckpt, root, CHUNKS, staging=staging)
    assert plan["to_embed"] == one["chunks"] and plan["reused"] == 0
    records = [None, None, None]
    for part in (2, 0, 1):
        out = tmp_path / "cache" / f"part-{part}.npz"
        rows = index_embed_part_stage(ckpt, root, part, 3, staging=staging, out_file=out)
        records[part] = {**part_record(out), "path": str(out)}
        assert rows == len(np.load(out)["rows"]) > 0
    tampered = tmp_path / "cache" / "bad.npz"
    shutil.copy(records[1]["path"], tampered)
    with pytest.raises(StalePlanError):
        index_publish_stage(clean, ckpt, root, CHUNKS, n_parts=3, staging=staging, tokenizer=tok,
                            parts=[records[0], {**records[1], "path": str(tampered), "sha256": "0" * 64}, records[2]])
    res = index_publish_stage(clean, ckpt, root, CHUNKS, n_parts=3, staging=staging, tokenizer=tok, parts=records)
    assert res["version"] == "v1" and res["embedded"] == one["chunks"] and staging.is_dir()  # kept for the cache
    # other parts batch other windows together (padding differs): equal up to float rounding
    assert np.allclose(np.load(root / "v1" / "embeddings.npy"), np.load(tmp_path / "one" / "v1" / "embeddings.npy"),
                       atol=1e-5)
    m1, m2 = (json.loads((r / "v1" / "manifest.json").read_text()) for r in (tmp_path / "one", root))
    assert m1["fusion"]["w_dense"] == m2["fusion"]["w_dense"] and m1["sparse"]["key"] == m2["sparse"]["key"]
    with pytest.raises(StalePlanError):  # a plan of other inputs with parts given: refused, not re-planned
        index_publish_stage(write_clean(policy_docs(edit=1), tmp_path / "c2"), ckpt, root, CHUNKS, n_parts=3,
                            staging=staging, tokenizer=tok, parts=records)


def test_convex_fusion_is_fitted_recorded_and_served(tmp_path, tok):
    """``FusionConfig(method="convex")``: the index fit uses both sides' scores, the manifest records the method,
    and the served hybrid score is the convex combination of the sides' z-normalised candidate scores."""
    from retrieval.fusion import fuse_convex
    from retrieval.retrievers import Retriever
    from retrieval.stages import index_stage

    ckpt, root = save_tiny_policybert(tmp_path / "ft", seed=3), tmp_path / "index"
    index_stage(write_clean(policy_docs(), tmp_path / "c1"), ckpt, root, CHUNKS, tokenizer=tok,
                fusion=FusionConfig(method="convex"))
    fit = json.loads((root / "v1" / "manifest.json").read_text())["fusion"]
    assert fit["method"] == "convex" and fit["fitted"] and fit["config"]["method"] == "convex"
    objective = lambda m: m["recall@10"] + m["mrr@10"]  # noqa: E731
    assert objective(fit["hybrid"]) >= max(objective(fit["dense"]), objective(fit["sparse"]))
    r = Retriever(root, tokenizer=tok)
    assert r.hybrid.method == "convex"
    q = "养老服务体系和普惠托育"
    hits = r.search(q, k=5)
    assert hits[0].doc_id == "d5"
    dense = r.search(q, k=r.hybrid.depth, mode="dense")
    sparse = r.search(q, k=r.hybrid.depth, mode="sparse")
    expect = fuse_convex([h.chunk_id for h in dense], [h.score for h in dense],
                         [h.chunk_id for h in sparse], [h.score for h in sparse], r.hybrid.w_dense)
    assert [(h.chunk_id, pytest.approx(h.score)) for h in hits] == [(c, s) for c, s, *_ in expect[:5]]
