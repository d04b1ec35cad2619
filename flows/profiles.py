"""Run profiles: one typed ``PipelineConfig`` gathering each stage's own config dataclass.

- ``cpu-small``: from-scratch small PolicyBERT (hidden 128, 2 layers), capped steps: the whole
  job on the real corpus in minutes on 2 CPU cores.
- ``gpu-base``: thesis scale (hidden 768, 12 layers, 6 word layers, 3 epochs; batch 32).
- ``tiny``: for tests (hidden 32), a few steps.
"""
from __future__ import annotations

from dataclasses import asdict, dataclass, field, replace

from corpus.clean import CleanConfig
from corpus.pairs import PairConfig
from corpus.sentences import SentenceConfig
from corpus.vocab import VocabConfig
from model.pretrain_data import PretrainDataConfig
from model.training import TrainConfig
from retrieval.chunks import ChunkConfig
from retrieval.index import IndexConfig


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


@dataclass(frozen=True)
class PipelineConfig:
    """Every stage's config for one run (JSON-able via ``dataclasses.asdict``)."""

    name: str = "cpu-small"
    clean: CleanConfig = CleanConfig()
    sentences: SentenceConfig = SentenceConfig()
    segmenter: str = "auto"
    segment_parts: int = 2
    vocab: VocabConfig = VocabConfig()
    pairs: PairConfig = PairConfig()
    pretrain_data: PretrainDataConfig = PretrainDataConfig()
    pretrain_epochs: int = 1
    model: ModelSize = ModelSize()
    pretrain: TrainConfig = TrainConfig(max_steps=1000, batch_size=32, lr=5e-4, log_every=100)
    finetune: TrainConfig = TrainConfig(max_steps=600, batch_size=32, lr=2e-4, log_every=100)
    finetune_max_eval: int | None = None
    chunks: ChunkConfig = ChunkConfig()
    index: IndexConfig = IndexConfig()
    embed_batch_size: int = 64
    embed_parts: int = 2
    sample_query: str = "什么是数据基础制度体系？"

    def to_dict(self) -> dict:
        return asdict(self)


PROFILES: dict[str, PipelineConfig] = {
    "cpu-small": PipelineConfig(),
    "gpu-base": PipelineConfig(
        name="gpu-base",
        pretrain_epochs=3,
        model=ModelSize(hidden_size=768, num_hidden_layers=12, num_attention_heads=12, intermediate_size=3072,
                        max_position_embeddings=512, fusion="gate", num_word_layers=6),
        pretrain=TrainConfig(epochs=1, batch_size=32, lr=1e-4, log_every=100),
        finetune=TrainConfig(epochs=3, batch_size=32, lr=5e-5, log_every=100),
        embed_batch_size=128,
    ),
    "tiny": PipelineConfig(
        name="tiny",
        vocab=VocabConfig(min_freq=3),
        model=ModelSize(hidden_size=32, num_attention_heads=2, intermediate_size=64),
        pretrain=TrainConfig(max_steps=4, batch_size=8, lr=1e-3, log_every=2),
        finetune=TrainConfig(max_steps=4, batch_size=8, lr=1e-3, log_every=2),
        finetune_max_eval=200,
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
