"""Crawl / import stage: produce the ``documents`` table (SPEC §1, §2). Plain library: no prefect."""
