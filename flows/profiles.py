"""Run profiles: one typed ``PipelineConfig`` gathering each stage's own config dataclass.

- ``cpu-small`` (the default): PolicyBERT on multilingual-e5-small's 12 layers reading its own pieces (SPEC §6,
  "Tokens of a SentencePiece body"), one gate word layer started from the body behind identity-initialised
  fusion; no MLM steps (``domain_adapt=False``); 850 PolicySM-1 fine-tuning steps at lr 5e-5 (the head at 20x),
  batch 32, max length 64 pieces, bf16 autocast, token embeddings frozen, on 2 CPU cores (~11 min). The retrieval
  encoder is chosen between the pretrained e5 (SPEC §8) and its average with the fine-tuned body.
- ``cpu-scratch``: the small PolicyBERT from scratch (hidden 128, 2 layers, 1 word layer, gate fusion), 5,000
  pretraining steps on sentence pairs of <= 64 chars (3 masking epochs) and 1,500 fine-tuning steps.
- ``gpu-base``: thesis scale: e5's 12 layers on its pieces, 6 word layers, gate fusion; 1 pretraining epoch,
  3 fine-tuning epochs at lr 5e-5, batch 32.
- ``tiny``: for tests (hidden 32, from scratch), a few steps.
"""
from __future__ import annotations

from dataclasses import asdict, dataclass, field, replace

from corpus.clean import CleanConfig
from corpus.pairs import PairConfig
from corpus.sentences import SentenceConfig
from corpus.vocab import VocabConfig
from model.backbone_stage import BackboneConfig
from model.pretrain_data import PretrainDataConfig
from model.training import TrainConfig
from retrieval.chunks import ChunkConfig
from retrieval.evaluate import EvalConfig
from retrieval.select import EncoderChoiceConfig
from retrieval.dense import IndexConfig
from retrieval.fusion import FusionConfig
from retrieval.sparse import SparseConfig


@dataclass(frozen=True)
class ModelSize:
    """PolicyBertConfig fields chosen by the profile (vocab sizes come from the data)."""

    hidden_size: int = 128
    num_hidden_layers: int = 2
    num_attention_heads: int = 2
    intermediate_size: int = 256
    max_position_embeddings: int = 128
    fusion: str = "gate"
    num_word_layers: int = 1
    max_words: int = 40
    # ZEN's additions of the last word states above the word layers (SPEC §6); false fuses in the word layers
    # only, which keeps a pretrained char body's upper layers (README, public benchmarks)
    word_add_above: bool = True


@dataclass(frozen=True)
class PipelineConfig:
    """Every stage's config for one run (JSON-able via ``dataclasses.asdict``). Stage contracts name their
    configs by field path (``Stage.settings``), so every field is reachable from ``--set``. ``segmenter``
    tokenizes the segments, the index's BM25 side (``sparse.segmenter``, kept equal to it) and the
    evaluation's BM25 baseline."""

    name: str = "cpu-small"
    clean: CleanConfig = CleanConfig()
    sentences: SentenceConfig = SentenceConfig()
    segmenter: str = "auto"
    segment_parts: int = 2
    vocab: VocabConfig = VocabConfig()
    pairs: PairConfig = PairConfig()
    # cpu-small: PolicyBERT on e5's 12 layers and its own pieces (SPEC §6). Measured on 2 cores (bench/fusion_bench.py,
    # docs/models.md): one PolicySM-1 epoch reaches test 0.787 (overlap LR 0.677); bf16 autocast halves a step
    # (0.72 s against 1.60 s for 32 pairs); e5's first 4 layers with the thesis's open fusion stayed at chance.
    backbone: BackboneConfig = BackboneConfig(kind="e5", layers=0, char_init=True, tokens="pieces")
    pretrain_data: PretrainDataConfig = PretrainDataConfig(max_len=64)
    pretrain_epochs: int = 1
    model: ModelSize = ModelSize(max_words=24)
    # MLM + NSP steps on the corpus before fine-tuning (SPEC §6); False keeps the initialised model
    domain_adapt: bool = False
    pretrain: TrainConfig = TrainConfig(max_steps=200, batch_size=32, lr=5e-5, log_every=50, save_every=100,
                                        precision="bf16", freeze="bert.embeddings.word_embeddings")
    # batches of similar length (TrainConfig.group_by_length): random batches of PolicySM-1 pad to 1.88x their
    # real pieces
    # the heap trimmed every 10 steps (TrainConfig.trim_every): the fine-tuning is the main job's memory peak
    # 850 steps (27,200 of PolicySM-1's 36,114 training pairs, a seeded sample; a step is 0.72 s on 2 cores and
    # fixed by compute: batch 64, fused AdamW, torch.compile and frozen lower layers measured no faster or lost
    # accuracy, docs/models.md), the new classifier head at 20x the body's rate (Howard & Ruder 2018)
    finetune: TrainConfig = TrainConfig(epochs=1, max_steps=850, batch_size=32, lr=5e-5, log_every=100,
                                        eval_every=600, save_every=200, precision="bf16",
                                        freeze="bert.embeddings.word_embeddings", lr_scales="classifier=20",
                                        group_by_length=True, trim_every=10)
    # fine-tuning pairs are cut to this many tokens (pieces or chars; PolicySM-1 pairs average 26 pieces)
    finetune_max_len: int = 64
    # dev/test pairs evaluated in fine-tuning (a seeded sample above it): 1x has ~4,000 per split, so this only
    # bounds the evaluation cost of larger corpora (21x: ~86,000 per split) to the same budget
    finetune_max_eval: int | None = 10_000
    chunks: ChunkConfig = ChunkConfig()
    index: IndexConfig = IndexConfig()
    sparse: SparseConfig = SparseConfig()
    fusion: FusionConfig = FusionConfig()
    # two 12-layer candidates (pretrained e5 and its average with the fine-tuned body; the fine-tuned classifier
    # alone ranks near chance, EncoderChoiceConfig.score_finetuned) embed the dev chunks of ~30 documents in bf16:
    # ~280 chunks and 30 lead queries, 1.3 min on 2 cores (three candidates over 45 documents: 4.7 min)
    retrieval_encoder: EncoderChoiceConfig = EncoderChoiceConfig(precision="bf16", dev_docs=24,
                                                                 score_finetuned=False)
    # the untrained-encoder row would embed every chunk again: it ranks a document sample of <= 256 chunks
    # instead, beside the version's own vectors on the same sample (retrieval.evaluate.untrained_rows)
    evaluate: EvalConfig = EvalConfig(untrained_max_chunks=0, untrained_sample_chunks=256)
    embed_batch_size: int = 64
    # the autocast the index embeds passages with (model.training.PRECISIONS; the embedding part, the publish's
    # missing chunks and the fusion fit's masked chunks): bf16 embeds e5-small's chunks 1.6x as fast as fp32 on
    # 2 cores, every vector at cosine >= 0.99999 to its fp32 one (docs/retrieval.md, "Embedding batches");
    # queries keep the encoder's own default. The encoder choice scores its candidates in bf16 too
    embed_precision: str = "bf16"
    # one embedding part: under the default thread runner two parts run at once, each loading its own encoder and
    # sharing the same cores (the embed stage's peak was 4,368 MiB with 2 parts on 2 cores); more parts pay off
    # across Dask workers or GPUs (--set embed_parts=N)
    embed_parts: int = 1
    sample_query: str = "什么是数据基础制度体系？"
    # the answer scorer pinned into every index version (SPEC §9; retrieval.parts): a fitted scorer JSON, relative
    # paths from the repository root; the default is the one the repository ships (fitted on the shared NCPQA
    # questions by flows.answer_eval --install); "" publishes versions without one
    answer_scorer: str = "answers/data/scorer.json"
    # installed instead when answer_scorer is refused (fitted with another encoder: a `tiny` run, an encoder the
    # encoder stage picked over e5): the shipped encoder-free scorer, which reads none of the encoder's features
    # (answers.features.ENCODER_FEATURES) and pins only the segmenter (flows.answer_eval --encoder-free
    # --install); "" = none
    answer_scorer_fallback: str = "answers/data/scorer-encoder-free.json"
    # a question set (NCPQA JSON Lines, ../shared/qa/README.md; relative paths from the repository root): when set,
    # the index stage FITS the answer scorer on these questions against the version it publishes (its encoder,
    # BM25 side and texts, before CURRENT switches; answers.stages) instead of installing answer_scorer; questions
    # whose document is not in the index are skipped and counted. "" = install answer_scorer
    answer_questions: str = ""
    # the query pipeline's reranker pinned into every index version (retrieval.rerankers): a reranker JSON file,
    # relative paths from the repository root (retrieval/data/bm25-window.json ships); "" = none
    reranker: str = ""
    # the answer stage's sentence cross-encoder pinned into every index version whose encoder it was trained on
    # (answers.rerank_features; retrieval.cross_encoder): its part JSON (the fp16 weights beside it), relative
    # paths from the repository root; a scorer fitted on its scores needs it; "" = none
    answer_reranker: str = ""
    # the related-policies model pinned into every index version (SPEC §12; docmatch.stage): LTM-B trained on a pair
    # file (JSON Lines {"a", "b", "label"[, "split"]}; relative paths from the repository root) or, without one, on
    # the title-pattern pairs derived from related_corpus (its documents embedded with the version's encoder, the
    # first related_segments segments each); a corpus file that does not exist skips the part ("" = none)
    related_pairs: str = ""
    related_corpus: str = "../shared/corpora/lawrefbook.jsonl.gz"
    related_segments: int = 1
    # the files of serving parts whose setting is not a field above ({setting: file}, relative paths from the
    # repository root): a part declared with its own setting (retrieval.serving_parts) is given its file here,
    # ``--set part_files.<setting>=FILE`` (e.g. the neural span reader's, docs/answers.md), so a
    # new part needs no field of this config; a key no declared part reads is an error
    part_files: dict = field(default_factory=dict)

    def to_dict(self) -> dict:
        return asdict(self)


PROFILES: dict[str, PipelineConfig] = {
    "cpu-small": PipelineConfig(),
    # the small model from scratch. Measured on the real corpus (2 cores): the budget that makes NSP, and with it
    # PolicySM-1, learn (bench/learning_curves.py: at 1000 steps NSP is still at chance; it leaves chance after
    # ~1,500 steps at lr 1e-3); PolicySM-1 test 0.708
    "cpu-scratch": PipelineConfig(
        name="cpu-scratch",
        backbone=BackboneConfig(kind="e5", layers=4, char_init=False),
        pretrain_epochs=3,
        model=ModelSize(),
        domain_adapt=True,
        pretrain=TrainConfig(max_steps=5000, batch_size=32, lr=1e-3, log_every=250, eval_every=1000, save_every=200),
        finetune=TrainConfig(max_steps=1500, batch_size=32, lr=2e-4, log_every=250, eval_every=250, save_every=200),
        finetune_max_len=128,
        retrieval_encoder=EncoderChoiceConfig(),
    ),
    "gpu-base": PipelineConfig(
        name="gpu-base",
        backbone=BackboneConfig(kind="e5", layers=0),
        pretrain_data=PretrainDataConfig(),
        pretrain_epochs=3,
        domain_adapt=True,
        finetune_max_len=128,
        model=ModelSize(hidden_size=768, num_hidden_layers=12, num_attention_heads=12, intermediate_size=3072,
                        max_position_embeddings=512, fusion="gate", num_word_layers=6),
        pretrain=TrainConfig(epochs=1, batch_size=32, lr=1e-4, log_every=100, save_every=500),
        finetune=TrainConfig(epochs=3, batch_size=32, lr=5e-5, log_every=100, save_every=500),
        embed_batch_size=128,
        embed_precision="auto",
        evaluate=EvalConfig(),
        retrieval_encoder=EncoderChoiceConfig(),
    ),
    "tiny": PipelineConfig(
        name="tiny",
        backbone=BackboneConfig(kind="none"),
        domain_adapt=True,
        finetune_max_len=128,
        vocab=VocabConfig(min_freq=3),
        model=ModelSize(hidden_size=32, num_attention_heads=2, intermediate_size=64),
        pretrain_data=PretrainDataConfig(),
        pretrain_epochs=1,
        pretrain=TrainConfig(max_steps=60, batch_size=8, lr=1e-3, log_every=10, save_every=10),
        finetune=TrainConfig(max_steps=4, batch_size=8, lr=1e-3, log_every=2, save_every=2),
        finetune_max_eval=200,
        embed_precision="auto",
        retrieval_encoder=EncoderChoiceConfig(dev_docs=5, max_queries=20),
        evaluate=EvalConfig(),
        related_corpus="",  # test runs publish without the related model (tests/test_related_stage.py trains it)
    ),
}


def get_profile(name: str, **overrides) -> PipelineConfig:
    """The named profile, with top-level fields replaced by ``overrides``.

    Raises:
        ValueError: unknown profile name (the message lists the known ones).
    """
    if name not in PROFILES:
        raise ValueError(f"unknown profile {name!r} (known: {', '.join(PROFILES)})")
    return replace(PROFILES[name], **overrides) if overrides else PROFILES[name]


def _parse_value(text: str, current):
    import json

    try:
        value = json.loads(text)
    except ValueError:
        value = text
    if isinstance(current, bool) and not isinstance(value, bool):
        raise ValueError(f"expected true or false, got {text!r}")
    if isinstance(current, bool) or current is None:
        return value
    if isinstance(current, float) and isinstance(value, int):
        return float(value)
    if not isinstance(value, type(current)):
        raise ValueError(f"expected a {type(current).__name__}, got {text!r}")
    return value


def _set(obj, path: list[str], text: str):
    from dataclasses import fields, is_dataclass

    if isinstance(obj, dict):  # a mapping setting (part_files): its key is the last name, its value a string
        if len(path) != 1 or not path[0]:
            raise ValueError(f"a key of a mapping setting is one name, got {'.'.join(path)!r}")
        return {**obj, path[0]: text}
    names = {f.name for f in fields(obj)} if is_dataclass(obj) else set()
    if path[0] not in names:
        raise ValueError(f"no setting {path[0]!r} (known: {', '.join(sorted(names))})")
    current = getattr(obj, path[0])
    value = _set(current, path[1:], text) if len(path) > 1 else _parse_value(text, current)
    return replace(obj, **{path[0]: value})


def with_settings(cfg: PipelineConfig, settings: list[str] | None) -> PipelineConfig:
    """``cfg`` with ``KEY=VALUE`` settings applied, KEY a dotted field path (``chunks.max_chars=500``,
    ``vocab.min_freq=5``, ``segment_parts=3``; a mapping's key: ``part_files.<setting>=FILE``), VALUE parsed as
    JSON (else a string) and checked against the field's current type (a mapping's values stay strings).

    Raises:
        ValueError: a malformed setting, an unknown field (the message lists the known ones) or a wrong type.
    """
    for item in settings or []:
        key, sep, text = item.partition("=")
        if not sep or not key:
            raise ValueError(f"--set {item!r}: expected KEY=VALUE")
        try:
            cfg = _set(cfg, key.split("."), text)
            if key == "segmenter":  # one tokenizer for the index's BM25 and the evaluation's BM25
                cfg = replace(cfg, sparse=replace(cfg.sparse, segmenter=cfg.segmenter))
        except ValueError as exc:
            raise ValueError(f"--set {item}: {exc}") from None
    if cfg.sparse.segmenter != cfg.segmenter:
        raise ValueError(f"--set sparse.segmenter={cfg.sparse.segmenter} differs from segmenter={cfg.segmenter}: "
                         "the index's BM25 and the evaluation's BM25 take one tokenizer (set segmenter)")
    return cfg


def setting(cfg: PipelineConfig, path: str):
    """The value of a dotted field path of ``cfg`` (``"clean"``, ``"pairs.seed"``).

    Raises:
        AttributeError: no such field.
    """
    value = cfg
    for name in path.split("."):
        value = getattr(value, name)
    return value
