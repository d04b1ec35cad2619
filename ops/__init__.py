"""Operations helpers that talk to a running Prefect server over HTTP (no prefect import)."""
