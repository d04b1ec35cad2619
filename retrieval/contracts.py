"""Stage contracts of the retrieval stages (see :mod:`storage.contracts`): index plan, embedding parts,
publish, evaluation. Plain data; the functions are in :mod:`retrieval.stages`."""
from __future__ import annotations

from retrieval.chunks import ChunkConfig
from storage.contracts import Stage, table, versioned

ENCODER = "models/finetune-policysm1"
PLANS, PARTS = "cache/parts/index-plan", "cache/parts/embed-part"
INDEX_PLAN = Stage("index-plan", "retrieval.stages:index_plan_stage", reads=("documents_clean", ENCODER),
                   config=ChunkConfig, settings={"cfg": "chunks", "index_cfg": "index"}, scratch=("index", PLANS))
EMBED_PART = Stage("embed-part", "retrieval.stages:index_embed_part_stage", reads=("documents_clean", ENCODER),
                   settings={"n_parts": "embed_parts", "batch_size": "embed_batch_size"},
                   scratch=("index", PLANS, PARTS), gpu=True)
INDEX = Stage("index", "retrieval.stages:index_publish_stage", reads=("documents_clean", ENCODER),
              writes=(versioned("index"),), config=ChunkConfig,
              settings={"cfg": "chunks", "index_cfg": "index", "batch_size": "embed_batch_size",
                        "n_parts": "embed_parts", "sparse": "sparse", "fusion": "fusion"},
              scratch=(PLANS, PARTS), gpu=True)
EVALUATE = Stage("evaluate-retrieval", "retrieval.stages:evaluate_stage", reads=("documents_clean", "index"),
                 writes=(table("eval/retrieval"),), settings={"segmenter": "segmenter", "seed": "pairs.seed"})
STAGES = (INDEX_PLAN, EMBED_PART, INDEX, EVALUATE)
