"""Stage contracts of the retrieval stages (see :mod:`storage.contracts`): index plan, embedding parts,
publish, evaluation. Plain data; the functions are in :mod:`retrieval.stages`."""
from __future__ import annotations

from retrieval.chunks import ChunkConfig
from storage.contracts import Stage

ENCODER = "models/finetune-policysm1"
_CODE = ("retrieval.chunks", "retrieval.index", "retrieval.embed", "retrieval.encoders", "retrieval.encoding",
         "retrieval.pinning", "retrieval.sparse", "retrieval.sparse_build", "retrieval.hybrid", "retrieval.dense",
         "retrieval.build", "retrieval.versions", "retrieval.fusion", "retrieval.mining", "retrieval.metrics",
         "retrieval.retrievers", "model.features", "model.modeling", "storage")

PLANS, PARTS = "cache/parts/index-plan", "cache/parts/embed-part"
INDEX_PLAN = Stage("index-plan", "retrieval.stages:index_plan_stage", reads=("documents_clean", ENCODER),
                   code=_CODE, config=ChunkConfig, scratch=("index", PLANS))
EMBED_PART = Stage("embed-part", "retrieval.stages:index_embed_part_stage", reads=("documents_clean", ENCODER),
                   code=_CODE, scratch=("index", PLANS, PARTS))
INDEX = Stage("index", "retrieval.stages:index_publish_stage", reads=("documents_clean", ENCODER), writes=("index",),
              code=_CODE, config=ChunkConfig, scratch=(PLANS, PARTS))
EVALUATE = Stage("evaluate-retrieval", "retrieval.stages:evaluate_stage", reads=("documents_clean", "index"),
                 writes=("eval/retrieval",), code=("retrieval.evaluate", *_CODE, "corpus.segment", "retrieval.query"))
STAGES = (INDEX_PLAN, EMBED_PART, INDEX, EVALUATE)
