"""One Prefect task per pipeline stage: thin wrappers over the library stage functions.

Each task reads and writes under ``data_dir`` (layout in :mod:`storage.layout`), returns a small
JSON summary (persisted by Prefect as the task result) and is cached by a content key
(:mod:`tasks.caching`). Retries only on the GPU-bound tasks (training, embedding).
"""
from __future__ import annotations

from pathlib import Path

from prefect import task

from corpus import stages as text
from corpus.clean import CleanConfig
from corpus.pairs import PairConfig
from corpus.sentences import SentenceConfig
from corpus.vocab import VocabConfig
from model import stages as mstages
from model.pretrain_data import PretrainDataConfig
from model.training import TrainConfig
from retrieval import stages as rstages
from retrieval.chunks import ChunkConfig
from retrieval.index import IndexConfig
from storage import layout as L
from tasks.caching import content_cache_key, jsonable
from tasks.progress import crawl_rate_limit, progress_artifact

TEXT = ("corpus", "storage")
MODEL = ("model", "storage")
CACHED = {"persist_result": True, "result_serializer": "json"}


def _p(data_dir: str, rel: str) -> Path:
    return Path(data_dir) / rel


@task(name="import-documents", cache_key_fn=content_cache_key(files=("input_csv", "sources_csv"),
                                                              packages=("crawler", "storage")), **CACHED)
def import_documents(data_dir: str, input_csv: str, sources_csv: str | None = None) -> dict:
    """CSV export -> ``documents``."""
    return text.import_documents(input_csv, _p(data_dir, L.DOCUMENTS), sources_csv)


@task(name="crawl", retries=1, retry_delay_seconds=60)
def crawl_documents(data_dir: str, registry: str | None = None, refresh: bool = False) -> dict:
    """Registry sources -> archive + crawl state -> ``documents`` (not cached: a crawl looks at the web;
    the archive and crawl state make a rerun fetch only new URLs, or, with ``refresh``, send
    conditional GETs)."""
    from crawler.crawl import CrawlConfig
    from crawler.registry import DEFAULT_REGISTRY
    from crawler.stages import crawl_stage

    return crawl_stage(_p(data_dir, L.DOCUMENTS), _p(data_dir, L.CRAWL_FAILURES), _p(data_dir, L.CRAWL),
                       registry or DEFAULT_REGISTRY, CrawlConfig(refresh=refresh),
                       on_progress=progress_artifact("crawl-progress", "URLs crawled"),
                       before_request=crawl_rate_limit)


@task(name="clean", cache_key_fn=content_cache_key(inputs=(L.DOCUMENTS,), packages=TEXT), **CACHED)
def clean(data_dir: str, cfg: CleanConfig) -> dict:
    """``documents`` -> ``documents_clean`` + ``rejects``."""
    return text.clean_stage(_p(data_dir, L.DOCUMENTS), _p(data_dir, L.DOCUMENTS_CLEAN), _p(data_dir, L.REJECTS), cfg)


@task(name="sentences", cache_key_fn=content_cache_key(inputs=(L.DOCUMENTS_CLEAN,), packages=TEXT), **CACHED)
def sentences(data_dir: str, cfg: SentenceConfig) -> dict:
    """``documents_clean`` -> ``sentences``."""
    return text.sentences_stage(_p(data_dir, L.DOCUMENTS_CLEAN), _p(data_dir, L.SENTENCES), cfg)


@task(name="segment-part", cache_key_fn=content_cache_key(inputs=(L.SENTENCES,), files=("user_dict",), packages=TEXT),
      **CACHED)
def segment_part(data_dir: str, part: int, n_parts: int, backend: str = "auto", user_dict: str | None = None) -> dict:
    """Segment one of ``n_parts`` row ranges of ``sentences`` (mapped; runs on any task runner)."""
    return text.segment_part(_p(data_dir, L.SENTENCES), _p(data_dir, L.SEGMENTS), part, n_parts, backend, user_dict,
                             cache_root=_p(data_dir, L.SEGMENT_CACHE))


@task(name="segment", cache_key_fn=content_cache_key(inputs=(L.SENTENCES,), files=("user_dict",), packages=TEXT),
      **CACHED)
def segment(data_dir: str, backend: str = "auto", user_dict: str | None = None, n_parts: int = 1) -> dict:
    """Merge the segmented parts into ``segments`` (HanLP; backend recorded); missing parts are segmented here."""
    return text.merge_segments(_p(data_dir, L.SENTENCES), _p(data_dir, L.SEGMENTS), n_parts, backend, user_dict,
                               cache_root=_p(data_dir, L.SEGMENT_CACHE))


@task(name="vocab", cache_key_fn=content_cache_key(inputs=(L.SEGMENTS,), files=("stopwords",), packages=TEXT),
      **CACHED)
def vocab(data_dir: str, stopwords: str | None, cfg: VocabConfig) -> dict:
    """``segments`` -> ``vocab`` (+ vocab.txt)."""
    return text.vocab_stage(_p(data_dir, L.SEGMENTS), _p(data_dir, L.VOCAB), stopwords, cfg)


@task(name="datasets", cache_key_fn=content_cache_key(inputs=(L.SENTENCES, L.DOCUMENTS_CLEAN), packages=TEXT),
      **CACHED)
def datasets(data_dir: str, cfg: PairConfig) -> dict:
    """``sentences`` -> ``policysm1/`` + ``policysm2/`` (split by document) with the shortcut probe."""
    return text.datasets_stage(_p(data_dir, L.SENTENCES), _p(data_dir, L.DOCUMENTS_CLEAN), data_dir, cfg)


@task(name="pretrain-data", cache_key_fn=content_cache_key(
    inputs=(L.SENTENCES, L.SEGMENTS, L.VOCAB, L.DOCUMENTS_CLEAN), files=("char_backbone",), packages=MODEL), **CACHED)
def pretrain_data(data_dir: str, pairs_cfg: PairConfig, cfg: PretrainDataConfig, epochs: int,
                  char_backbone: str | None = None) -> dict:
    """Char tokenizer (the backbone's vocab when given) + ``pretrain/epoch=N/`` (whole-word masking, NSP)."""
    tok = mstages.tokenizer_stage(_p(data_dir, L.SENTENCES), _p(data_dir, L.TOKENIZER), char_backbone)
    split_of = text.document_splits(_p(data_dir, L.DOCUMENTS_CLEAN), pairs_cfg)
    out = mstages.pretrain_data_stage(_p(data_dir, L.SENTENCES), _p(data_dir, L.SEGMENTS), _p(data_dir, L.VOCAB),
                                      _p(data_dir, L.TOKENIZER), split_of, _p(data_dir, L.PRETRAIN), cfg, epochs)
    return {**tok, **out}


@task(name="pretrain", retries=1, retry_delay_seconds=10, tags=["gpu"],
      cache_key_fn=content_cache_key(inputs=(L.PRETRAIN, L.TOKENIZER, L.VOCAB),
                                     files=("char_backbone", "word_backbone"), packages=MODEL), **CACHED)
def pretrain(data_dir: str, model_kwargs: dict, cfg: TrainConfig, epochs: int, out: str = L.PRETRAINED_MODEL,
             char_backbone: str | None = None, word_backbone: str | None = None) -> dict:
    """PolicyBERT pretraining (MLM + NSP) -> ``out`` with held-out metrics; resumable after a kill."""
    metrics = mstages.pretrain_stage(_p(data_dir, L.PRETRAIN), _p(data_dir, L.TOKENIZER), _p(data_dir, L.VOCAB),
                                     _p(data_dir, out), jsonable(model_kwargs), cfg, epochs,
                                     char_backbone=char_backbone, word_backbone=word_backbone,
                                     on_step=progress_artifact("pretrain-progress", f"pretraining steps ({out})"))
    return {"heldout": metrics["heldout"], "train": metrics["train"], "init_report": metrics["init_report"]}


@task(name="finetune", retries=1, retry_delay_seconds=10, tags=["gpu"],
      cache_key_fn=content_cache_key(inputs=("{pretrained}", "{dataset}"), packages=MODEL), **CACHED)
def finetune(data_dir: str, cfg: TrainConfig, max_eval_examples: int | None = None,
             pretrained: str = L.PRETRAINED_MODEL, dataset: str = L.POLICYSM1, out: str = L.FINETUNED_MODEL) -> dict:
    """Fine-tune ``pretrained`` on a PolicySM dataset -> ``out``: dev/test accuracy and F1 of the best-by-dev
    checkpoint, beside the non-neural baselines."""
    m = mstages.finetune_stage(_p(data_dir, pretrained), _p(data_dir, dataset), _p(data_dir, out), cfg,
                               max_eval_examples=max_eval_examples,
                               on_step=progress_artifact("finetune-progress", f"fine-tuning steps ({out})"))
    return {k: m[k] for k in ("dev", "test", "majority_test", "baselines", "best_step", "train")}


_INDEX_KEY = dict(inputs=(L.DOCUMENTS_CLEAN, L.FINETUNED_MODEL), packages=("retrieval", *MODEL))


@task(name="index-plan", cache_key_fn=content_cache_key(**_INDEX_KEY), **CACHED)
def index_plan(data_dir: str, cfg: ChunkConfig, index_cfg: IndexConfig) -> dict:
    """Chunk the cleaned corpus and stage which chunks need embedding (the rest reuse stored vectors)."""
    return rstages.index_plan_stage(_p(data_dir, L.DOCUMENTS_CLEAN), _p(data_dir, L.FINETUNED_MODEL),
                                    _p(data_dir, L.INDEX), cfg, index_cfg)


@task(name="embed-part", retries=1, retry_delay_seconds=10, tags=["gpu"],
      cache_key_fn=content_cache_key(**_INDEX_KEY), **CACHED)
def embed_part(data_dir: str, part: int, n_parts: int, batch_size: int = 64) -> int:
    """Embed one slice of the staged chunks (mapped over parts)."""
    return rstages.index_embed_part_stage(
        _p(data_dir, L.FINETUNED_MODEL), _p(data_dir, L.INDEX), part, n_parts, batch_size,
        on_progress=progress_artifact(f"embedding-progress-{part}", f"chunk windows embedded, part {part}"))


@task(name="index", retries=1, retry_delay_seconds=10, tags=["gpu"], cache_key_fn=content_cache_key(**_INDEX_KEY),
      **CACHED)
def index(data_dir: str, cfg: ChunkConfig, index_cfg: IndexConfig, batch_size: int = 64, n_parts: int = 1) -> dict:
    """Publish the staged refresh as ``index/vN`` and switch ``index/CURRENT`` (only new/changed chunks embedded)."""
    return rstages.index_publish_stage(_p(data_dir, L.DOCUMENTS_CLEAN), _p(data_dir, L.FINETUNED_MODEL),
                                       _p(data_dir, L.INDEX), cfg, index_cfg, n_parts, batch_size)


@task(name="evaluate-retrieval", cache_key_fn=content_cache_key(**_INDEX_KEY), **CACHED)
def evaluate_retrieval(data_dir: str, segmenter: str = "auto", seed: int = 13) -> dict:
    """recall@1/5/10 and MRR: PolicyBERT index vs untrained encoder vs BM25; table artifact."""
    from prefect.artifacts import create_table_artifact

    res = rstages.evaluate_stage(_p(data_dir, L.DOCUMENTS_CLEAN), _p(data_dir, L.INDEX),
                                 _p(data_dir, L.RETRIEVAL_EVAL), segmenter, seed)
    create_table_artifact(table=res["table"], key="retrieval-evaluation",
                          description=f"Known-item search, {res['queries']} title/citation queries; "
                                      f"IVF recall@10 vs exact {res['ivf_recall@10_vs_exact']:.3f}, "
                                      f"HNSW {res['hnsw_recall@10_vs_exact']:.3f}")
    return res


@task(name="sample-query")
def sample_query(data_dir: str, query: str, k: int = 3) -> list[dict]:
    """Top-k hits for one query against the serving index (not cached: it reads the live index)."""
    hits = rstages.query_index(_p(data_dir, L.INDEX), query, k)
    return [{"score": h["score"], "title": h["title"], "source": h["source"], "url": h["url"],
             "doc_id": h["doc_id"]} for h in hits]


@task(name="dataset-report", cache_key_fn=content_cache_key(
    inputs=(L.DOCUMENTS, L.DOCUMENTS_CLEAN, L.REJECTS, L.SENTENCES, L.VOCAB, L.POLICYSM1, L.POLICYSM2),
    packages=TEXT), **CACHED)
def dataset_report(data_dir: str) -> dict:
    """Data card (Markdown + PNG plots) under ``report/``, published as Prefect artifacts."""
    from prefect.artifacts import create_markdown_artifact, create_table_artifact

    from corpus.report import build_report

    rep = build_report(data_dir, _p(data_dir, L.REPORT))
    create_markdown_artifact(markdown=rep["markdown"], key="dataset-report",
                             description=f"Dataset report; plots in {_p(data_dir, L.REPORT)}")
    create_table_artifact(table=rep["pairs"], key="policysm-pairs", description="PolicySM pairs per split/kind/label")
    create_table_artifact(table=rep["probe"], key="shortcut-probe", description="Shortcut probe vs majority baseline")
    return {"files": rep["files"], "probe": rep["probe"]}


@task(name="lineage")
def lineage(data_dir: str) -> list[dict]:
    """Lineage of every output (fingerprints, inputs, config, code) as ``lineage.md`` and a Markdown artifact."""
    from prefect.artifacts import create_markdown_artifact

    from storage import atomic_write_text
    from storage.lineage import lineage_markdown, lineage_records

    records = lineage_records(data_dir)
    md = lineage_markdown(records)
    atomic_write_text(_p(data_dir, L.LINEAGE), md)
    create_markdown_artifact(markdown=md, key="lineage", description=f"Lineage of {data_dir}")
    return records
