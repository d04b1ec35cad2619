"""Scoped search inside the ranking (retrieval.scope + Retriever.search(docs=...)): both sides restricted."""
import pytest

from retrieval.chunks import ChunkConfig
from tests.retrieval_builders import policy_docs, save_tiny_policybert, write_clean

CHUNKS = ChunkConfig(max_chars=120, overlap=30)


@pytest.fixture(scope="module")
def retriever(tmp_path_factory):
    from retrieval.retrievers import Retriever
    from retrieval.sparse import make_tokenizer
    from retrieval.stages import index_stage

    tmp, tok = tmp_path_factory.mktemp("scoped"), make_tokenizer("auto")
    ckpt, root = save_tiny_policybert(tmp / "ft", seed=3), tmp / "index"
    index_stage(write_clean(policy_docs(), tmp / "c1"), ckpt, root, CHUNKS, tokenizer=tok)
    return Retriever(root, tokenizer=tok)


@pytest.mark.parametrize("mode", ["hybrid", "dense", "sparse"])
def test_scope_restricts_candidates_before_top_k(retriever, mode):
    q = "养老服务体系和普惠托育"
    free = retriever.search(q, k=3, mode=mode)
    top = free[0].doc_id
    others = set(retriever.chunks["doc_id"].astype(str)) - {top}
    scoped = retriever.search(q, k=3, mode=mode, docs=others)
    assert scoped and all(h.doc_id in others for h in scoped)
    only = retriever.search(q, k=3, mode=mode, docs={top})
    assert {h.doc_id for h in only} == {top}
    assert retriever.search(q, k=3, mode=mode, docs=set()) == []
