"""The index stage with the models fitted on the staged version inside it: the answer scorer (SPEC §9) and the
related-policies model (SPEC §12): when the pipeline is given a question set
(``PipelineConfig.answer_questions``, NCPQA JSON Lines), the scorer pinned into the new index version is fitted
on those questions against that version itself — its encoder, BM25 side and texts, while it is staged, before
``index/CURRENT`` switches (:class:`retrieval.parts.FittedPart`) — instead of installing a scorer fitted
elsewhere. Without questions it is :func:`retrieval.stages.index_publish_stage` as it is.
"""
from __future__ import annotations

import os
from pathlib import Path

from retrieval.chunks import ChunkConfig
from retrieval.dense import IndexConfig
from retrieval.fusion import FusionConfig
from answers.parts import ANSWER_SCORER_PART
from retrieval.parts import FittedPart
from retrieval.sparse import SparseConfig



def scorer_part(questions: str | os.PathLike, data_dir: str | os.PathLike | None = None, tokenizer=None,
                log=print) -> FittedPart:
    """The ``answer_scorer`` part fitted on the NCPQA-format question file ``questions``
    (:func:`answers.fit.fit_on_questions`) over the staged version, as ``flows.answer_eval --refit all`` fits
    it. ``data_dir``: where the import and cleaning lineage lies (``documents``, ``rejects``: a question about a
    document cleaning dropped as a duplicate goes to the one kept, :func:`answers.ncpqa.duplicate_targets`).
    The part's record holds the scorer's ``provenance`` and ``fit`` (the figures of the fit).

    Raises (when fitted): FileNotFoundError / ValueError naming the file (see ``fit_on_questions``).
    """
    def fit(index_root: Path, version: str) -> tuple[str, dict]:
        from answers.backend import SearchBackend
        from answers.fit import fit_on_questions
        from answers.ncpqa import duplicate_targets

        backend = SearchBackend(index_root, version, tokenizer=tokenizer)
        dups = duplicate_targets(data_dir) if data_dir is not None else {}
        scorer, figures = fit_on_questions(backend, questions, dups, log)
        return scorer.to_json(), {"provenance": scorer.info["provenance"], "fit": figures}

    return FittedPart(ANSWER_SCORER_PART.name, ANSWER_SCORER_PART.file, fit)


def scorer_fit(inputs: dict) -> FittedPart | None:
    """The ``answer_scorer`` part's fit when the index stage's ``inputs`` give a question set
    (``answer_questions``; ``clean_dir``'s data dir holds its lineage, ``tokenizer`` the loaded segmenter), else
    None (the part is then installed from its file, if given)."""
    if not inputs.get("answer_questions"):
        return None
    return scorer_part(inputs["answer_questions"], Path(inputs["clean_dir"]).parent, inputs.get("tokenizer"))


def index_publish_stage(clean_dir, ckpt_dir, index_root, cfg: ChunkConfig, index_cfg: IndexConfig = IndexConfig(),
                        n_parts: int = 1, batch_size: int = 64, device: str = "auto", *,
                        precision: str | None = None,
                        sparse: SparseConfig | None = SparseConfig(), fusion: FusionConfig = FusionConfig(),
                        tokenizer=None, staging: str | os.PathLike | None = None,
                        parts: list[dict] | None = None, related_segments: int = 1,
                        policy_dir: str | os.PathLike | None = None, **part_inputs) -> dict:
    """:func:`retrieval.stages.index_publish_stage` with every declared serving part
    (:func:`retrieval.serving_parts.serving_parts`) built from ``part_inputs`` (the index stage's inputs the
    declarations name: :func:`retrieval.serving_parts.index_inputs`): a part with a fit asked for (the answer
    scorer on ``answer_questions``, :func:`scorer_fit`; the related-policies model on ``related_pairs`` or
    ``related_corpus``, :func:`docmatch.parts.related_fit`, SPEC §12) is fitted over the staged version, and is
    then not installed from its file; the others are installed from their files (``answer_reranker`` before
    the scorer's fit, which then reads its sentence scores). The result's ``serving_parts.<name>`` holds each
    part's record (a fit's figures). ``precision``: the autocast chunks and the related part's corpus segments are
    embedded with (:data:`model.training.PRECISIONS`; None: the encoder kind's default). ``policy_dir``: the data dir's ``policy_records`` table the policy records
    part is fitted from (:func:`retrieval.policy_records.records_fit`; missing: computed from ``clean_dir``).

    Raises:
        TypeError: an input no declared part reads.
        FileNotFoundError / ValueError: naming the question file: missing, not NCPQA JSON Lines, or no question
            about a document of the version (nothing is published then; ``CURRENT`` is left as it was).
    """
    from retrieval.serving_parts import fitted_parts, index_inputs, serving_parts
    from retrieval.stages import index_publish_stage as publish

    declared = serving_parts()
    unknown = sorted(set(part_inputs) - set(index_inputs(declared)))
    if unknown:
        raise TypeError(f"index_publish_stage: no serving part reads {unknown}")
    if part_inputs.get("answer_questions") and tokenizer is None and sparse is not None:
        from retrieval.sparse import make_tokenizer  # one segmenter load for the BM25 side and the fit

        tokenizer = make_tokenizer(sparse.segmenter)
    fitted = fitted_parts(declared, {**part_inputs, "clean_dir": clean_dir, "tokenizer": tokenizer,
                                     "related_segments": related_segments, "policy_dir": policy_dir,
                                     "precision": precision})
    return publish(clean_dir, ckpt_dir, index_root, cfg, index_cfg, n_parts, batch_size, device,
                   precision=precision, sparse=sparse,
                   fusion=fusion, tokenizer=tokenizer, staging=staging, parts=parts, fitted_parts=fitted,
                   **part_inputs)
