"""Crawl stage over storage: registry -> archive + crawl state -> ``documents`` + ``crawl_failures``."""
from __future__ import annotations

import os
from dataclasses import asdict
from pathlib import Path

from crawler.archive import CrawlState, RawArchive
from crawler.crawl import CrawlConfig, crawl, documents_from_archive
from crawler.registry import DEFAULT_REGISTRY, load_registry
from storage import atomic_path, file_sha256, write_table
from storage.contracts import Stage


def crawl_stage(documents_dir, failures_dir, crawl_root, registry: str | os.PathLike = DEFAULT_REGISTRY,
                cfg: CrawlConfig = CrawlConfig(), on_progress=None, before_request=None) -> dict:
    """Crawl the registry's sources into ``crawl_root`` (archive ``raw/``, ``state.sqlite``,
    ``raw_index.parquet``), then extract offline into the ``documents`` table; fetch and extraction
    failures go to ``crawl_failures`` with their reasons. Nothing partial reaches ``documents``."""
    sources = load_registry(registry)
    root = Path(crawl_root)
    state, archive = CrawlState(root / "state.sqlite"), RawArchive(root)
    try:
        counts = crawl(sources, state, archive, cfg, on_progress, before_request)
        docs, fails = documents_from_archive(sources, state, archive, cfg.extract)
        with atomic_path(root / "raw_index.parquet") as tmp:
            state.frame().to_parquet(tmp, index=False)
    finally:
        state.close()
    stats = {"crawl": counts, "documents": int(len(docs)), "failures": {str(k): int(v) for k, v in
                                                                       fails["reason"].value_counts().items()},
             "sources": len(sources), "ocr_documents": int(docs["ocr"].sum()) if len(docs) else 0}
    cv = CRAWL.code_version()
    config = {**asdict(cfg), "registry": str(registry)}
    write_table(fails, failures_dir, name="crawl_failures", config=config, code_version=cv, stats=stats)
    write_table(docs.drop(columns=["ocr"]), documents_dir, name="documents", config=config, code_version=cv,
                inputs={"registry": file_sha256(registry)}, stats=stats)
    return stats


# Stage contract (see storage.contracts). Not cached: a crawl looks at the web; its archive and crawl state
# (scratch) make a rerun fetch only new URLs.
CRAWL = Stage("crawl", "crawler.stages:crawl_stage", writes=("documents", "crawl_failures"),
              code=("crawler.crawl", "crawler.extract", "crawler.fetch", "crawler.registry", "crawler.urlpolicy",
                    "crawler.netguard", "crawler.sandbox", "crawler.textsafe", "crawler.archive", "storage"),
              config=CrawlConfig, files=("registry",), scratch=("crawl",))
STAGES = (CRAWL,)
