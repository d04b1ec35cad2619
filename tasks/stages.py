"""One Prefect task per pipeline stage: thin wrappers over the library stage functions.

Each task's name, cache key, inputs and output paths come from its stage contract (``STAGES`` in
``corpus/``, ``model/``, ``retrieval/``, ``crawler/`` and :mod:`storage.contracts`) through
:func:`tasks.caching.stage_task`; the bodies only pass the declared paths to the library function.
Each returns a small JSON summary (persisted by Prefect as the task result). Retries only on the
GPU-bound tasks (training, embedding) and the crawl.
"""
from __future__ import annotations

from pathlib import Path

from prefect import task

from corpus import stages as text
from corpus.clean import CleanConfig
from corpus.pairs import PairConfig
from corpus.sentences import SentenceConfig
from corpus.vocab import VocabConfig
from crawler import stages as crawler_stages
from model import stages as mstages
from model.pretrain_data import PretrainDataConfig
from model.training import TrainConfig
from retrieval import contracts as R
from retrieval import stages as rstages
from retrieval.chunks import ChunkConfig
from retrieval.index import IndexConfig
from storage import layout as L
from storage.mapped import part_file, part_record, prune_parts
from tasks.caching import current_key, jsonable, parts_dir, stage_task
from tasks.progress import crawl_rate_limit, progress_artifact

GPU = {"retries": 1, "retry_delay_seconds": 10, "tags": ["gpu"]}


def _paths(stage, data_dir: str, **params) -> dict:
    """The stage's declared reads, writes and scratch folders under ``data_dir``, by name."""
    return {**{n: Path(data_dir) / n for n in stage.scratch}, **stage.read_paths(data_dir, params),
            **stage.write_paths(data_dir, params)}


@stage_task(text.IMPORT)
def import_documents(data_dir: str, input_path: str, sources_csv: str | None = None,
                     columns: dict | None = None) -> dict:
    """CSV export, or JSON Lines / Parquet with a column mapping -> ``documents``."""
    p = _paths(text.IMPORT, data_dir)
    return text.import_documents(input_path, p["documents"], sources_csv, columns=columns)


@task(name="crawl-plan")
def crawl_plan(registry: str | None = None) -> list[str]:
    """The registry's source ids: one crawl partition each (fails at once on an invalid registry)."""
    from crawler.registry import DEFAULT_REGISTRY

    return crawler_stages.crawl_plan(registry or DEFAULT_REGISTRY)


@task(name=crawler_stages.CRAWL_SOURCE.name, task_run_name="crawl-{source_id}", retries=1, retry_delay_seconds=5)
def crawl_source(data_dir: str, source_id: str, registry: str | None = None, refresh: bool = False) -> dict:
    """One source -> its crawl state, archived bodies and part files (mapped over the registry's sources; not
    cached: a crawl looks at the web). An unreachable source fails this task alone (retried once)."""
    from crawler.crawl import CrawlConfig
    from crawler.registry import DEFAULT_REGISTRY

    p = _paths(crawler_stages.CRAWL_SOURCE, data_dir)
    return jsonable(crawler_stages.crawl_source_stage(p["crawl"], Path(data_dir) / L.DOCUMENTS, source_id,
                                                      registry or DEFAULT_REGISTRY, CrawlConfig(refresh=refresh),
                                                      before_request=crawl_rate_limit))


@task(name=crawler_stages.CRAWL_MERGE.name)
def crawl_merge(data_dir: str, registry: str | None, refresh: bool, source_ids: list[str], records: list) -> dict:
    """Per-source records (a failed source's exception in its place) -> ``documents``, ``crawl_failures`` and
    ``crawl_diff``; publishes the diff per source as the ``crawl-diff`` table artifact."""
    from prefect.artifacts import create_table_artifact

    from crawler.crawl import CrawlConfig
    from crawler.partition import source_by_id, unreachable_record
    from crawler.registry import DEFAULT_REGISTRY

    registry = registry or DEFAULT_REGISTRY
    recs = [r if isinstance(r, dict) else unreachable_record(source_by_id(registry, sid), r)
            for sid, r in zip(source_ids, records)]
    p = _paths(crawler_stages.CRAWL_MERGE, data_dir)
    stats = crawler_stages.merge_crawl(recs, p["documents"], p["crawl_failures"], p["crawl_diff"], registry,
                                       CrawlConfig(refresh=refresh), p["crawl"])
    names = {r["source_id"]: r["name"] for r in recs}
    create_table_artifact(key="crawl-diff", description="Crawl diff per source (documents by status)",
                          table=[{"source": names.get(sid, sid), "source_id": sid, **counts}
                                 for sid, counts in stats["diff"].items()])
    return stats


@stage_task(text.CLEAN)
def clean(data_dir: str, cfg: CleanConfig) -> dict:
    """``documents`` -> ``documents_clean`` + ``rejects``."""
    p = _paths(text.CLEAN, data_dir)
    return text.clean_stage(p["documents"], p["documents_clean"], p["rejects"], cfg)


@stage_task(text.SENTENCES)
def sentences(data_dir: str, cfg: SentenceConfig) -> dict:
    """``documents_clean`` -> ``sentences``."""
    p = _paths(text.SENTENCES, data_dir)
    return text.sentences_stage(p["documents_clean"], p["sentences"], cfg)


@stage_task(text.SEGMENT_PLAN)
def segment_plan(data_dir: str, n_parts: int) -> dict:
    """The segmentation plan (sentences fingerprint, row ranges of ``n_parts`` parts), passed to the parts."""
    return text.segment_plan(_paths(text.SEGMENT_PLAN, data_dir)["sentences"], n_parts)


@stage_task(text.SEGMENT_PART, part=".parquet")
def segment_part(data_dir: str, plan: dict, part: int, backend: str = "auto", user_dict: str | None = None) -> dict:
    """Segment part ``part`` of ``plan`` into a part file named by this task's cache key (mapped); the
    record's path is relative to ``data_dir``."""
    p = _paths(text.SEGMENT_PART, data_dir)
    out = part_file(parts_dir(data_dir, text.SEGMENT_PART), current_key())
    rec = text.segment_part(p["sentences"], plan, part, out, backend, user_dict, cache_root=p["cache/segments"])
    return {**rec, "path": str(out.relative_to(data_dir))}


@stage_task(text.SEGMENT)
def segment(data_dir: str, backend: str = "auto", user_dict: str | None = None, parts: list[dict] | None = None) -> dict:
    """Merge the part files (``parts``: the part records in part order) into ``segments``; part files of
    earlier plans are removed."""
    p = _paths(text.SEGMENT, data_dir)
    parts = [{**r, "path": str(Path(data_dir) / r["path"])} for r in parts or []]
    out = text.merge_segments(p["sentences"], parts, p["segments"], backend, user_dict, cache_root=p["cache/segments"])
    prune_parts(parts_dir(data_dir, text.SEGMENT_PART), parts)
    return out


@stage_task(text.VOCAB)
def vocab(data_dir: str, stopwords: str | None, cfg: VocabConfig) -> dict:
    """``segments`` -> ``vocab`` (+ vocab.txt)."""
    p = _paths(text.VOCAB, data_dir)
    return text.vocab_stage(p["segments"], p["vocab"], stopwords, cfg)


@stage_task(text.DATASETS)
def datasets(data_dir: str, cfg: PairConfig) -> dict:
    """``sentences`` -> ``policysm1/`` + ``policysm2/`` (split by document) with the shortcut probe."""
    p = _paths(text.DATASETS, data_dir)
    return text.datasets_stage(p["sentences"], p["documents_clean"], {n: p[n] for n in text.DATASETS.writes}, cfg)


@stage_task(mstages.PRETRAIN_DATA)
def pretrain_data(data_dir: str, pairs_cfg: PairConfig, cfg: PretrainDataConfig, epochs: int,
                  char_backbone: str | None = None) -> dict:
    """Char tokenizer (the backbone's vocab when given) + ``pretrain/epoch=N/`` (whole-word masking, NSP)."""
    p = _paths(mstages.PRETRAIN_DATA, data_dir)
    return mstages.pretrain_inputs_stage(p["sentences"], p["segments"], p["vocab"], p["documents_clean"],
                                         p["tokenizer"], p["pretrain"], pairs_cfg, cfg, epochs, char_backbone)


@stage_task(mstages.PRETRAIN, **GPU)
def pretrain(data_dir: str, model_kwargs: dict, cfg: TrainConfig, epochs: int, out: str = L.PRETRAINED_MODEL,
             char_backbone: str | None = None, word_backbone: str | None = None) -> dict:
    """PolicyBERT pretraining (MLM + NSP) -> ``out`` with held-out metrics; resumable after a kill."""
    p = _paths(mstages.PRETRAIN, data_dir, out=out)
    metrics = mstages.pretrain_stage(p["pretrain"], p["tokenizer"], p["vocab"], p[out], jsonable(model_kwargs), cfg,
                                     epochs, char_backbone=char_backbone, word_backbone=word_backbone,
                                     on_step=progress_artifact("pretrain-progress", f"pretraining steps ({out})"))
    return {"heldout": metrics["heldout"], "train": metrics["train"], "init_report": metrics["init_report"]}


@stage_task(mstages.FINETUNE, **GPU)
def finetune(data_dir: str, cfg: TrainConfig, max_eval_examples: int | None = None,
             pretrained: str = L.PRETRAINED_MODEL, dataset: str = L.POLICYSM1, out: str = L.FINETUNED_MODEL) -> dict:
    """Fine-tune ``pretrained`` on a PolicySM dataset -> ``out``: dev/test accuracy and F1 of the best-by-dev
    checkpoint, beside the non-neural baselines."""
    p = _paths(mstages.FINETUNE, data_dir, pretrained=pretrained, dataset=dataset, out=out)
    m = mstages.finetune_stage(p[pretrained], p[dataset], p[out], cfg, max_eval_examples=max_eval_examples,
                               on_step=progress_artifact("finetune-progress", f"fine-tuning steps ({out})"))
    return {k: m[k] for k in ("dev", "test", "majority_test", "baselines", "best_step", "train")}


@stage_task(R.INDEX_PLAN, part="")
def index_plan(data_dir: str, cfg: ChunkConfig, index_cfg: IndexConfig) -> dict:
    """Chunk the cleaned corpus and plan the refresh (which chunks to embed, which reuse stored vectors) in a
    staging folder named by this task's cache key; the plan (with that folder) is passed to the parts."""
    p = _paths(R.INDEX_PLAN, data_dir)
    staging = part_file(parts_dir(data_dir, R.INDEX_PLAN), current_key(), "")
    out = rstages.index_plan_stage(p["documents_clean"], p[R.ENCODER], p["index"], cfg, index_cfg, staging=staging)
    return {**out, "staging": str(staging.relative_to(data_dir))}


@stage_task(R.EMBED_PART, part=".npz", **GPU)
def embed_part(data_dir: str, plan: dict, part: int, n_parts: int, batch_size: int = 64) -> dict:
    """Embed slice ``part`` of the planned chunks into a part file named by this task's cache key (mapped);
    returns its record (path relative to ``data_dir``, sha256, rows)."""
    p = _paths(R.EMBED_PART, data_dir)
    out = part_file(parts_dir(data_dir, R.EMBED_PART), current_key(), ".npz")
    rows = rstages.index_embed_part_stage(
        p[R.ENCODER], p["index"], part, n_parts, batch_size, staging=Path(data_dir) / plan["staging"], out_file=out,
        on_progress=progress_artifact(f"embedding-progress-{part}", f"chunk windows embedded, part {part}"))
    return {**part_record(out), "path": str(out.relative_to(data_dir)), "rows": rows, "part": part}


@stage_task(R.INDEX, **GPU)
def index(data_dir: str, cfg: ChunkConfig, index_cfg: IndexConfig, batch_size: int = 64, n_parts: int = 1,
          plan: dict | None = None, parts: list[dict] | None = None) -> dict:
    """Publish the planned refresh with the embedded ``parts`` as ``index/vN`` and switch ``index/CURRENT``
    (only new/changed chunks embedded); plans and parts of earlier refreshes are pruned."""
    p = _paths(R.INDEX, data_dir)
    staging = Path(data_dir) / plan["staging"]
    parts = [{**r, "path": str(Path(data_dir) / r["path"])} for r in parts or []]
    out = rstages.index_publish_stage(p["documents_clean"], p[R.ENCODER], p["index"], cfg, index_cfg, n_parts,
                                      batch_size, staging=staging, parts=parts)
    prune_parts(parts_dir(data_dir, R.INDEX_PLAN), [{"path": str(staging)}])
    prune_parts(parts_dir(data_dir, R.EMBED_PART), parts)
    return out


@stage_task(R.EVALUATE)
def evaluate_retrieval(data_dir: str, segmenter: str = "auto", seed: int = 13) -> dict:
    """recall@1/5/10 and MRR: PolicyBERT index vs untrained encoder vs BM25; table artifact."""
    from prefect.artifacts import create_table_artifact

    p = _paths(R.EVALUATE, data_dir)
    res = rstages.evaluate_stage(p["documents_clean"], p["index"], p["eval/retrieval"], segmenter, seed)
    create_table_artifact(table=res["table"], key="retrieval-evaluation",
                          description=f"Known-item search, {res['queries']} title/citation queries; "
                                      f"IVF recall@10 vs exact {res['ivf_recall@10_vs_exact']:.3f}, "
                                      f"HNSW {res['hnsw_recall@10_vs_exact']:.3f}")
    return res


@task(name="sample-query")
def sample_query(data_dir: str, query: str, k: int = 3) -> list[dict]:
    """Top-k hits for one query against the serving index (not cached: it reads the live index)."""
    hits = rstages.query_index(R.INDEX.write_paths(data_dir)["index"], query, k)
    return [{"score": h["score"], "title": h["title"], "source": h["source"], "url": h["url"],
             "doc_id": h["doc_id"]} for h in hits]


@stage_task(text.REPORT)
def dataset_report(data_dir: str) -> dict:
    """Data card (Markdown + PNG plots) under ``report/``, published as Prefect artifacts."""
    from prefect.artifacts import create_markdown_artifact, create_table_artifact

    from corpus.report import build_report

    out = text.REPORT.write_paths(data_dir)["report"]
    rep = build_report(text.REPORT.read_paths(data_dir), out)
    create_markdown_artifact(markdown=rep["markdown"], key="dataset-report", description=f"Dataset report; plots in {out}")
    create_table_artifact(table=rep["pairs"], key="policysm-pairs", description="PolicySM pairs per split/kind/label")
    create_table_artifact(table=rep["probe"], key="shortcut-probe", description="Shortcut probe vs majority baseline")
    return {"files": rep["files"], "probe": rep["probe"]}


@task(name="lineage")
def lineage(data_dir: str) -> list[dict]:
    """Lineage of every output (fingerprints, producing stage and key, inputs, config, code) as ``lineage.md``
    and a Markdown artifact."""
    from prefect.artifacts import create_markdown_artifact

    from storage import atomic_write_text
    from storage.lineage import lineage_markdown, lineage_records

    records = lineage_records(data_dir)
    md = lineage_markdown(records)
    atomic_write_text(Path(data_dir) / L.LINEAGE, md)
    create_markdown_artifact(markdown=md, key="lineage", description=f"Lineage of {data_dir}")
    return records
