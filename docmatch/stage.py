"""Building the ``related`` part of an index version (SPEC §12, §7): LTM-B trained on a pair file over the
version's own document matrices, plus documents outside the version (a corpus file) embedded with the version's
pinned encoder and chunked as the version chunks.

The part is one JSON file (``related.json``, :mod:`docmatch.ltm`) whose ``info.provenance`` names the version's
encoder (``encoder_model_id``) and segmenter. The index stage trains it on the staged version as a
:class:`retrieval.parts.FittedPart` (:func:`related_part`); :func:`build_related_part` is the training itself.
"""
from __future__ import annotations

import hashlib
import json
from dataclasses import asdict, replace
from pathlib import Path

from docmatch.ltm import LTMConfig, save
from docmatch.pairs import PairConfig, read_pairs, split_laws
from docmatch.ranking import rank_metrics
from docmatch.serve import PART, PART_FILE
from docmatch.train import TrainConfig, ltm_scores, train_ltm

PAIRS_FORMAT = 2  # bump when docmatch.pairs derives pairs differently: cached default pair files are then rebuilt


def version_docs(version_dir: Path) -> tuple[dict, set[str]]:
    """(manifest, doc ids with chunks) of a staged or published version folder.

    Raises:
        FileNotFoundError: no ``manifest.json`` or ``chunks.parquet`` in ``version_dir``.
    """
    import pandas as pd

    manifest = json.loads((version_dir / "manifest.json").read_text(encoding="utf-8"))
    ids = set(pd.read_parquet(version_dir / "chunks.parquet", columns=["doc_id"])["doc_id"].astype(str))
    return manifest, ids


def version_external_ids(version_dir: Path) -> dict[str, str]:
    """external_id -> doc_id of the documents of a version whose chunks carry one (an imported corpus keeps its
    ids there: ``--id-column``); an ``external_id`` two documents share maps nowhere; ``{}`` without the column."""
    import pandas as pd
    import pyarrow.parquet as pq

    if "external_id" not in pq.read_schema(version_dir / "chunks.parquet").names:
        return {}
    c = pd.read_parquet(version_dir / "chunks.parquet", columns=["doc_id", "external_id"]).drop_duplicates()
    c = c[c["external_id"].notna()]
    c = c[~c["external_id"].duplicated(keep=False)]
    return dict(zip(c["external_id"].astype(str), c["doc_id"].astype(str)))


def to_version_ids(pairs, version_dir: Path):
    """``pairs`` (``a``, ``b`` ids) with every id the version holds as a document's ``external_id``
    (:func:`version_external_ids`) replaced by that document's ``doc_id``, and the number replaced. Such a pair
    is then fitted on the version's own vectors (all its chunks for the mean, as served) and text, never embedded
    again from the corpus."""
    by_ext = version_external_ids(version_dir)
    out = pairs.copy()
    for col in ("a", "b"):
        out[col] = out[col].map(lambda x: by_ext.get(x, x))
    return out, int((out["a"] != pairs["a"]).sum() + (out["b"] != pairs["b"]).sum())


def citing_names(pairs, version_dir: Path) -> dict[str, tuple[str, ...]]:
    """regulation doc_id -> the names of its parent (:func:`docmatch.pairs.title_names`) for every positive pair
    whose regulation the version holds: what the citation-stripped recipe removes (:func:`docmatch.pairs.
    strip_other`), so its chunks naming them are left out of the fit's vectors (SPEC §12)."""
    import pandas as pd

    from docmatch.pairs import title_names

    c = pd.read_parquet(version_dir / "chunks.parquet", columns=["doc_id", "title"]).drop_duplicates("doc_id")
    title = dict(zip(c["doc_id"].astype(str), c["title"].fillna("")))
    pos = pairs[pairs["label"] == 1]
    return {a: title_names(title[b]) for a, b in zip(pos["a"], pos["b"]) if a in title and title.get(b)}


def document_matrices(version_dir: Path, manifest: dict, ids, corpus=None, cache_dir=None,
                      max_segments: int = 2, precision: str | None = None, drop: dict | None = None
                      ) -> tuple[dict, dict]:
    """(id -> matrix, embedding figures): the version's own vectors for its documents (``drop``: their chunks
    naming a positive pair's parent left out, :func:`citing_names`), the others from
    ``corpus`` (:func:`docmatch.pairs.read_corpus` file; stripped texts) embedded by a
    :class:`docmatch.segments.SegmentCache` over the pinned encoder (``cache_dir``; ``precision``: its autocast,
    None: the encoder kind's default).

    Raises:
        ValueError: ids neither in the version nor in ``corpus``.
    """
    from docmatch.pairs import load_texts, read_corpus
    from docmatch.segments import encoder_cache, version_matrices
    from retrieval.chunks import ChunkConfig

    _, inside = version_docs(version_dir)
    mats = version_matrices(version_dir, [i for i in ids if i in inside], max_segments, drop)
    outside = sorted(set(ids) - set(mats))
    if not outside:
        return mats, {"embedded_segments": 0}
    if corpus is None:
        raise ValueError(f"{len(outside)} pair ids are not in the version and no corpus was given "
                         f"(first: {outside[0]!r})")
    texts = load_texts(read_corpus(corpus), outside)
    if len(texts) < len(outside):
        raise ValueError(f"{len(outside) - len(texts)} pair ids are neither in the version nor in {corpus}")
    enc = version_dir.parent / manifest["encoder_dir"]
    cache = encoder_cache(enc, cache_dir, ChunkConfig(**manifest.get("config", {})), precision=precision)
    mats.update(cache.matrices(texts, max_segments))
    return mats, cache.stats


def build_related_part(version_dir, pairs_file, out_dir, corpus=None, cache_dir=None, candidates=None,
                       cfg: LTMConfig = LTMConfig(max_segments=2), tcfg: TrainConfig = TrainConfig(),
                       log=print, precision: str | None = None) -> dict:
    """Train LTM-B on ``pairs_file`` (:func:`docmatch.pairs.read_pairs`; without a ``split`` column the pairs
    are split by their ``b`` document, seeded) over the version in ``version_dir`` and write
    ``out_dir/related.json``. ``candidates``: the pool test queries are ranked in (default: every ``b``);
    ``precision``: the autocast documents outside the version are embedded with (None: the encoder's default).

    Returns figures: ``path``, ``test`` (recall@1, MRR on the test positives, when any), ``best_dev_mrr``,
    ``train_s``, ``epochs``, ``embedding`` (segments embedded / read from the cache, seconds).

    Raises:
        FileNotFoundError / ValueError: a missing version file, a bad pair file, ids without a document.
    """
    vdir, out = Path(version_dir), Path(out_dir)
    manifest, _ = version_docs(vdir)
    pairs = read_pairs(pairs_file)
    if "split" not in pairs.columns:
        split = split_laws(pairs["b"], PairConfig(seed=tcfg.seed))
        pairs["split"] = pairs["b"].map(split)
    pairs, mapped = to_version_ids(pairs, vdir)
    if candidates:
        by_ext = version_external_ids(vdir)
        candidates = {by_ext.get(c, c) for c in candidates}
    ids = sorted(set(pairs["a"]) | set(pairs["b"]) | set(candidates or ()))
    cache_dir = Path(cache_dir) if cache_dir else out / "segments"
    drop = citing_names(pairs, vdir)
    mats, emb = document_matrices(vdir, manifest, ids, corpus, cache_dir, cfg.max_segments, precision, drop)
    dim = next(iter(mats.values())).shape[1]
    cands = sorted(candidates) if candidates else sorted(set(pairs["b"]))
    model, hist = train_ltm(pairs, mats, replace(cfg, dim=dim), tcfg, log=log)
    test = pairs[(pairs["split"] == "test") & (pairs["label"] == 1)]
    figs = {"best_dev_mrr": hist["best_dev_mrr"], "train_s": round(hist["seconds"], 1),
            "epochs": len(hist["epochs"]), "embedding": emb, "pairs": int(len(pairs)), "ids_in_version": mapped,
            "test": rank_metrics(lambda a, c: ltm_scores(model, mats, a, c), test, cands) if len(test) else None}
    from retrieval.parts import version_identity
    from storage import file_sha256

    from docmatch.fused_fit import fit_fusion

    fusion = fit_fusion(vdir, pairs, mats, lambda a, c: ltm_scores(model, mats, a, c), cands, corpus, drop)
    figs["fusion"] = {k: v for k, v in fusion.items() if k != "pool"}
    info = {"provenance": version_identity(manifest), "figures": figs, "pairs_sha256": file_sha256(pairs_file),
            "train": asdict(tcfg), "fusion": fusion}
    out.mkdir(parents=True, exist_ok=True)
    save(model, out / PART_FILE, info)
    return {**figs, "path": str(out / PART_FILE)}


def pd_concat(*frames):
    """The frames stacked, index reset (pair tables with the columns of the first)."""
    import pandas as pd

    return pd.concat(frames, ignore_index=True)


def default_pairs(corpus, out_file, cfg: PairConfig = PairConfig()) -> Path:
    """The default pair set (the corpus's title-pattern pairs, :func:`docmatch.pairs.derive_pairs`) written to
    ``out_file`` once per corpus content (an existing file is reused: its name carries the corpus's sha256).

    Raises:
        FileNotFoundError: no ``corpus``. ValueError: the corpus has no regulation implementing a law.
    """
    from docmatch.citations import default_citation_pairs
    from docmatch.pairs import derive_pairs, read_corpus, write_pairs

    out = Path(out_file)
    if not out.is_file():
        c = read_corpus(corpus)
        write_pairs(pd_concat(derive_pairs(c, cfg), default_citation_pairs(c, cfg)), out)
    return out


def related_part(pairs=None, corpus=None, work_dir=None, max_segments: int = 1, seed: int = 13, log=print,
                 precision: str | None = None):
    """The ``related`` part of a staged index version as a :class:`retrieval.parts.FittedPart`: LTM-B trained
    (:func:`build_related_part`) on ``pairs`` (a pair file a user brings) or, without one, on the default set
    derived from ``corpus`` (the LawRefBook title-pattern pairs, whose documents are embedded with the version's
    pinned encoder in ``precision``, first ``max_segments`` segments each, cached under ``work_dir``). The
    part's record holds
    the version's ``provenance`` and the training ``figures`` (held-out recall@1 / MRR of the parent law).

    Raises (when fitted): FileNotFoundError / ValueError from a user's pair file or the training on it; with the
    default set, such an error (no title-pattern pairs, an unreadable corpus) records the part as refused with
    the reason instead, and the version is published without it.
    """
    from retrieval.parts import FittedPart, version_identity
    from storage import file_sha256

    work = Path(work_dir)

    def train(index_root: Path, version: str) -> tuple[str, dict]:
        pairs_file = pairs
        if not pairs:  # the default set, cached by the corpus's content (a user's pair file needs no corpus)
            pcfg = PairConfig(seed=seed)
            key = hashlib.sha256(json.dumps([file_sha256(corpus), asdict(pcfg), PAIRS_FORMAT]).encode()).hexdigest()
            pairs_file = default_pairs(corpus, work / f"pairs-{key[:16]}.jsonl", pcfg)
        vdir = Path(index_root) / version
        figs = build_related_part(vdir, pairs_file, work / "model", corpus=corpus, cache_dir=work / "segments",
                                  cfg=LTMConfig(max_segments=max_segments), tcfg=TrainConfig(seed=seed), log=log,
                                  precision=precision)
        text = Path(figs.pop("path")).read_text(encoding="utf-8")
        manifest = json.loads((vdir / "manifest.json").read_text(encoding="utf-8"))
        return text, {"provenance": version_identity(manifest), "figures": figs,
                      "pairs": "default" if not pairs else str(pairs), "pairs_sha256": file_sha256(pairs_file)}

    def own(index_root: Path, version: str, reason: str) -> tuple[str, dict]:
        from docmatch.fused_fit import build_own_part

        vdir = Path(index_root) / version
        figs = build_own_part(vdir, work / "model" / PART_FILE, max_segments, seed, reason)
        manifest = json.loads((vdir / "manifest.json").read_text(encoding="utf-8"))
        return (work / "model" / PART_FILE).read_text(encoding="utf-8"), {
            "provenance": version_identity(manifest), "figures": figs, "pairs": "own documents", "reason": reason}

    def fit(index_root: Path, version: str) -> tuple[str | None, dict]:
        if pairs:  # the user's labels: their errors stop the publication
            return train(index_root, version)
        if not corpus:  # no labels at all: the fused ranking of the version's own documents, default weights
            return own(index_root, version, "no related pair file and no related corpus")
        try:  # the default set: a corpus without title-pattern pairs falls back to the own documents, saying why
            return train(index_root, version)
        except (OSError, ValueError) as exc:
            log(f"related part from the version's own documents: {exc}")
            return own(index_root, version, f"default related pairs from {Path(corpus).name}: {exc}")

    return FittedPart(PART, PART_FILE, fit)


RELATED_CACHE = "cache/related"  # the index stage's scratch under the data dir: default pairs, embedded segments


def related_fit(inputs: dict):
    """The ``related`` part's fit (:data:`docmatch.parts.RELATED_PART`) from the index stage's ``inputs``: a pair
    file (``related_pairs``), else a corpus (``related_corpus``), else the version's own documents (the fused
    ranking with default weights, :func:`docmatch.fused_fit.build_own_part`); ``clean_dir`` and
    ``related_segments`` and ``precision`` (the index's embedding autocast) read too."""
    pairs, corpus = inputs.get("related_pairs"), inputs.get("related_corpus")
    return related_part(pairs or None, corpus or None, Path(inputs["clean_dir"]).parent / RELATED_CACHE,
                        int(inputs.get("related_segments") or 1), precision=inputs.get("precision"))
