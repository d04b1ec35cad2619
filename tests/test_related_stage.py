"""The related-policies model pinned in the index version (SPEC §12, §7): the index stage trains LTM-B on the
staged version before ``CURRENT`` switches — by default on the title-pattern pairs of a corpus of laws whose
documents are embedded with the version's pinned encoder — and records it as the version's ``related`` part, so
serving ranks the version's own documents with it; a version with no pair source gets the fused ranking of its own
documents (default weights, docmatch.fused_fit.build_own_part)."""
from __future__ import annotations

import json


from tests.test_related import corpus_rows

CHUNKS = dict(max_chars=120, overlap=30)


def test_the_index_stage_pins_a_related_model_trained_on_the_default_pairs(tmp_path):
    from answers.stages import index_publish_stage
    from docmatch import load
    from retrieval.chunks import ChunkConfig
    from retrieval.parts import version_identity
    from tests.retrieval_builders import policy_docs, save_tiny_bert, write_clean

    corpus = tmp_path / "laws.jsonl"
    corpus.write_text("\n".join(json.dumps(r, ensure_ascii=False) for r in corpus_rows()) + "\n", encoding="utf-8")
    data = tmp_path / "data"
    clean = write_clean(policy_docs(), data / "documents_clean")
    enc = save_tiny_bert(tmp_path / "enc")
    res = index_publish_stage(clean, enc, data / "index", ChunkConfig(**CHUNKS), sparse=None,
                              answer_scorer=None, related_corpus=corpus, related_segments=2)
    vdir = data / "index" / res["version"]
    manifest = json.loads((vdir / "manifest.json").read_text(encoding="utf-8"))
    rec = manifest["parts"]["related"]
    ident = version_identity(manifest)
    assert {k: rec["provenance"][k] for k in ident} == ident  # trained over this version's encoder
    figs = rec["figures"]
    assert figs["embedding"]["embedded_segments"] > 0  # the laws are outside the version: embedded with its encoder
    assert figs["test"]["queries"] >= 1 and rec["pairs"] == "default"
    assert sorted((data / "cache" / "related").glob("pairs-*.jsonl"))  # the derived pair file, reused next time
    rel = load(vdir)
    hits = rel.related("d0", k=3)
    assert len(hits) == 3 and "d0" not in {h["doc_id"] for h in hits}
    assert {h["doc_id"] for h in hits} <= set(policy_docs()["doc_id"])  # ranks the version's own documents
    again = index_publish_stage(clean, enc, data / "index", ChunkConfig(**CHUNKS), sparse=None, answer_scorer=None)
    v2 = json.loads((data / "index" / again["version"] / "manifest.json").read_text(encoding="utf-8"))
    own = v2["parts"]["related"]  # no pair source: the fused ranking of the version's own documents
    assert own["pairs"] == "own documents" and not own["figures"]["fusion"]["fitted"]
    assert own["figures"]["fusion"]["weights"]["ltm"] == 0.0 and own["figures"]["own_documents"] == 8
    hits = load(data / "index" / again["version"]).related("d5", k=3)
    assert len(hits) == 3 and "d5" not in {h["doc_id"] for h in hits}
    assert [h["score"] for h in hits] == sorted((h["score"] for h in hits), reverse=True)


def test_a_default_corpus_without_pairs_publishes_the_own_documents_part(tmp_path):
    """The default training set is a convenience: with a corpus with no title-pattern pairs the part is the fused
    ranking of the version's own documents (default weights), the reason recorded (SPEC §12)."""
    from answers.stages import index_publish_stage
    from retrieval.chunks import ChunkConfig
    from tests.retrieval_builders import policy_docs, save_tiny_bert, write_clean

    corpus = tmp_path / "laws.jsonl"
    laws = [r for r in corpus_rows() if r["level"] == "法律"]  # laws only: no regulation implements one
    corpus.write_text("\n".join(json.dumps(r, ensure_ascii=False) for r in laws) + "\n", encoding="utf-8")
    data = tmp_path / "data"
    res = index_publish_stage(write_clean(policy_docs(), data / "documents_clean"), save_tiny_bert(tmp_path / "enc"),
                              data / "index", ChunkConfig(**CHUNKS), sparse=None, answer_scorer=None,
                              related_corpus=corpus)
    rec = res["serving_parts"]["related"]
    assert (data / "index" / "CURRENT").read_text().strip() == "v1"
    assert "no law with a regulation" in rec["reason"] and rec["pairs"] == "own documents"  # fused, own documents


def test_pairs_whose_documents_the_version_holds_are_fitted_on_its_own_vectors_and_stripped_text(tmp_path):
    """An imported corpus keeps its ids as ``external_id``: the default pairs over that corpus are read as the
    version's own documents (every chunk's vector for the mean, as served; nothing embedded again), and a
    positive pair's regulation is stripped of its parent's name in the fit's text as it is for a corpus
    document (the citation-stripped recipe, SPEC §12)."""
    import pandas as pd

    from answers.stages import index_publish_stage
    from docmatch.fused_fit import pool_texts
    from docmatch.pairs import read_pairs
    from docmatch.stage import to_version_ids
    from retrieval.chunks import ChunkConfig
    from tests.retrieval_builders import save_tiny_bert, write_clean

    rows = corpus_rows()
    corpus = tmp_path / "laws.jsonl"
    corpus.write_text("\n".join(json.dumps(r, ensure_ascii=False) for r in rows) + "\n", encoding="utf-8")
    docs = pd.DataFrame([{"doc_id": f"v{k:03d}", "text": r["text"], "title": r["title"], "source": "import",
                          "url": None, "citation": None, "n_chars": len(r["text"]), "external_id": r["id"]}
                         for k, r in enumerate(rows)])
    data = tmp_path / "data"
    clean = write_clean(docs, data / "documents_clean")
    enc = save_tiny_bert(tmp_path / "enc")
    res = index_publish_stage(clean, enc, data / "index", ChunkConfig(max_chars=40, overlap=10), sparse=None,
                              answer_scorer=None, related_corpus=corpus, related_segments=2)
    vdir = data / "index" / res["version"]
    figs = json.loads((vdir / "manifest.json").read_text(encoding="utf-8"))["parts"]["related"]["figures"]
    assert figs["ids_in_version"] > 0 and figs["embedding"]["embedded_segments"] == 0
    assert figs["fusion"]["fitted"] and figs["test"]["queries"] >= 1

    pairs_file = sorted((data / "cache" / "related").glob("pairs-*.jsonl"))[0]
    pairs, mapped = to_version_ids(read_pairs(pairs_file), vdir)
    assert mapped == 2 * len(pairs) and set(pairs["a"]) <= set(docs["doc_id"])
    pos = pairs[(pairs["label"] == 1) & pairs["a"].str.startswith("v")].iloc[0]
    texts, titles = pool_texts(vdir, [pos["a"], pos["b"]], corpus, pairs)
    parent = titles[pos["b"]]
    short = parent.removeprefix("中华人民共和国")
    assert short in docs.set_index("doc_id").loc[pos["a"], "text"]  # the version holds the citation ...
    assert short not in texts[pos["a"]]  # ... the fit's text does not

    from docmatch.segments import version_matrices
    from docmatch.stage import citing_names

    drop = citing_names(pairs, vdir)
    assert set(drop[pos["a"]]) == {parent, short}
    full = version_matrices(vdir, [pos["a"]])[pos["a"]]
    cut = version_matrices(vdir, [pos["a"]], drop=drop)[pos["a"]]
    assert 0 < len(cut) < len(full)  # the vectors of the chunks naming the parent are left out of the fit
