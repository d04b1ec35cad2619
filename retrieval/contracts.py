"""Stage contracts of the retrieval stages (see :mod:`storage.contracts`): index plan, embedding parts,
publish, evaluation. Plain data; the functions are in :mod:`retrieval.stages`."""
from __future__ import annotations

from retrieval.chunks import ChunkConfig
from retrieval.select import EncoderChoiceConfig
from retrieval.serving_parts import index_inputs, part_modules, serving_parts
from storage.contracts import Stage, folder, table, versioned

FINETUNED, E5, BACKBONE = "models/finetune-policysm1", "models/e5", "models/backbone"
ENCODER = "models/retrieval-encoder"  # the index's encoder, chosen on a dev split (SPEC §7-§8)
CHOICE_SCRATCH = "cache/retrieval-encoder"
RETRIEVAL_ENCODER = Stage("retrieval-encoder", "retrieval.stages:retrieval_encoder_stage",
                          reads=("documents_clean", FINETUNED, E5, BACKBONE), writes=(folder(ENCODER),),
                          config=EncoderChoiceConfig, settings={"cfg": "retrieval_encoder"}, scratch=(CHOICE_SCRATCH,),
                          args={"clean_dir": "documents_clean", "finetuned_dir": FINETUNED, "e5_dir": E5,
                                "backbone_dir": BACKBONE, "out_dir": ENCODER, "scratch_dir": CHOICE_SCRATCH}, gpu=True)
# The index refresh mapped over parts (storage.mapped): the plan stages chunks in a folder named by its cache key,
# each embedding part writes one .npz file, the publish reads them in part order.
INDEX_PLAN = Stage("index-plan", "retrieval.stages:index_plan_stage", reads=("documents_clean", ENCODER),
                   config=ChunkConfig, settings={"cfg": "chunks", "index_cfg": "index"}, scratch=("index",),
                   part_file="", args={"clean_dir": "documents_clean", "ckpt_dir": ENCODER, "index_root": "index",
                                       "staging": "*part"})
EMBED_PART = Stage("embed-part", "retrieval.stages:index_embed_part_stage", reads=(ENCODER,),
                   settings={"n_parts": "embed_parts", "batch_size": "embed_batch_size",
                             "precision": "embed_precision"}, inputs=("part",),
                   scratch=("index",), part_file=".npz", takes_parts={"plan": "index-plan"},
                   args={"ckpt_dir": ENCODER, "index_root": "index", "staging": "plan.path", "out_file": "*part"},
                   gpu=True)
# the index-stage inputs every declared serving part reads (retrieval.serving_parts: the declarations of each
# library, named by "module:NAME" and resolved here as the stage's fn is, never imported above this layer)
SERVING_INPUTS = index_inputs(serving_parts())
# the publish is answers.stages' (the layer above): with a question set it fits the answer scorer on the staged
# version before CURRENT switches (SPEC §9)
# it reads policy_records too (its fingerprint enters the cache key: "missing" where no policy stage ran): the
# policy_records serving part is fitted from it (retrieval.policy_records)
INDEX = Stage("index", "answers.stages:index_publish_stage", reads=("documents_clean", ENCODER, "policy_records"),
              writes=(versioned("index"),), config=ChunkConfig,
              settings={"cfg": "chunks", "index_cfg": "index", "batch_size": "embed_batch_size",
                        "precision": "embed_precision", "n_parts": "embed_parts", "sparse": "sparse", "fusion": "fusion",
                        "related_segments": "related_segments"},
              inputs=SERVING_INPUTS, files=SERVING_INPUTS, scratch=("cache/related",),
              code=part_modules(serving_parts()),  # the declarations' modules, named by string
              takes_parts={"plan": "index-plan", "parts": "embed-part"},
              args={"clean_dir": "documents_clean", "ckpt_dir": ENCODER, "index_root": "index", "staging": "plan.path",
                    "policy_dir": "policy_records"},
              gpu=True)
EVALUATE = Stage("evaluate-retrieval", "retrieval.stages:evaluate_stage", reads=("documents_clean", "index"),
                 writes=(table("eval/retrieval"),),
                 settings={"segmenter": "segmenter", "seed": "pairs.seed", "cfg": "evaluate",
                           "precision": "embed_precision"},
                 args={"clean_dir": "documents_clean", "index_root": "index", "out_dir": "eval/retrieval"})
STAGES = (RETRIEVAL_ENCODER, INDEX_PLAN, EMBED_PART, INDEX, EVALUATE)
