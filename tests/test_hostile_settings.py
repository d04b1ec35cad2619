"""Settings validated at start-up (typed config dataclasses, storage/bounds.py; flows/cli.py): a value out of
its range is one ``error:`` line naming the field and its range, exit 2, before anything runs."""
from __future__ import annotations

import subprocess
import sys

import pytest

from tests.conftest import REPO

BAD = {
    "chunks.max_chars=0": "ChunkConfig.max_chars = 0: must be an integer in [8, 1000000]",
    "chunks.overlap=750": "ChunkConfig.overlap = 750 must be < max_chars = 750",
    "index.hnsw_m=0": "IndexConfig.hnsw_m = 0: must be an integer in [2, 256]",
    "index.nprobe=-1": "IndexConfig.nprobe = -1",
    "index.ef_search=0": "IndexConfig.ef_search = 0",
    "pretrain.lr=0": "TrainConfig.lr = 0.0: must be a number in (0, 10]",
    "pretrain.lr=NaN": "TrainConfig.lr = nan",
    "finetune.batch_size=0": "TrainConfig.batch_size = 0",
    "finetune.warmup_ratio=1.5": "TrainConfig.warmup_ratio = 1.5",
    "vocab.min_freq=0": "VocabConfig.min_freq = 0",
    "vocab.min_len=9": "VocabConfig.min_len = 9 must be <= max_len = 5",
    "clean.min_cjk_ratio=2": "CleanConfig.min_cjk_ratio = 2.0",
    "clean.num_perm=0": "CleanConfig.num_perm = 0",
    "sentences.max_chars=0": "SentenceConfig.max_chars = 0",
    "pairs.reversed_share=-0.1": "PairConfig.reversed_share = -0.1",
    "pairs.max_clause_chars=0": "PairConfig.max_clause_chars = 0",
    "pretrain_data.mask_prob=0": "PretrainDataConfig.mask_prob = 0.0",
    "pretrain_data.max_len=4096": "pretrain_data.max_len = 4096: must be <= model.max_position_embeddings",
    "segment_parts=0": "PipelineConfig.segment_parts = 0",
    "embed_parts=0": "PipelineConfig.embed_parts = 0",
    "embed_batch_size=0": "PipelineConfig.embed_batch_size = 0",
    "embed_precision=fp8": "PipelineConfig.embed_precision = 'fp8': must be one of",
    "model.hidden_size=33": "model.hidden_size = 33: must be a multiple of model.num_attention_heads",
    "model.num_hidden_layers=0": "ModelSize.num_hidden_layers = 0",
    "model.fusion=\"sum\"": "ModelSize.fusion = 'sum': must be one of",
    "model.word_add_above=no": "--set model.word_add_above=no: expected true or false, got 'no'",
    "backbone.char_init=1": "expected true or false, got '1'",
}


@pytest.mark.parametrize("setting", list(BAD))
def test_out_of_range_setting_is_refused_naming_field_and_range(setting):
    from flows.cli import check_settings
    from flows.profiles import get_profile, with_settings

    with pytest.raises(ValueError) as e:
        check_settings(with_settings(get_profile("tiny"), [setting]))
    assert BAD[setting] in str(e.value) and "\n" not in str(e.value)


def test_every_profile_passes_its_own_bounds():
    from flows.cli import check_settings
    from flows.profiles import PROFILES

    for name, cfg in PROFILES.items():
        check_settings(cfg)


def test_library_configs_check_their_bounds_when_made():
    from crawler.discovery import DiscoveryConfig
    from crawler.fetch import FetchConfig
    from retrieval.chunks import ChunkConfig
    from retrieval.fusion import FusionConfig
    from retrieval.sparse import SparseConfig

    for make, msg in ((lambda: ChunkConfig(max_chars=0), "ChunkConfig.max_chars"),
                      (lambda: SparseConfig(b=2.0), "SparseConfig.b"),
                      (lambda: SparseConfig(method="bm99"), "SparseConfig.method"),
                      (lambda: FusionConfig(lead_min=70), "FusionConfig.lead_min"),
                      (lambda: FetchConfig(deadline=0), "FetchConfig.deadline"),
                      (lambda: FetchConfig(retries=True), "FetchConfig.retries"),
                      (lambda: DiscoveryConfig(max_parse_seconds=float("inf")), "DiscoveryConfig.max_parse_seconds")):
        with pytest.raises(ValueError, match=msg):
            make()


def test_cli_refuses_max_chars_zero_before_anything_runs(tmp_path, real_slice):
    data = tmp_path / "data"
    r = subprocess.run([sys.executable, "-m", "flows.pipeline", "--input", str(real_slice), "--data-dir", str(data),
                        "--profile", "tiny", "--set", "chunks.max_chars=0"], cwd=REPO, capture_output=True,
                       text=True, timeout=120)
    assert r.returncode == 2 and "Traceback" not in r.stderr
    assert r.stderr.strip() == "error: --set chunks.max_chars=0: ChunkConfig.max_chars = 0: must be an integer in " \
                               "[8, 1000000]"
    assert not (data / "documents").exists()
