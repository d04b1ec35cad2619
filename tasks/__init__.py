"""Thin Prefect ``@task`` wrappers around the library stages, with content-hash cache keys."""
