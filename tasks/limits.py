"""Create the orchestrator limits on the Prefect API in ``PREFECT_API_URL`` (run by the deploy script):

- tag concurrency limit ``gpu`` = number of GPUs: training and embedding tasks never share a GPU;
- a global concurrency limit per registered crawl host (limit 1, one slot freed per ``delay`` seconds):
  the rate limit crawl requests take (:func:`tasks.progress.crawl_rate_limit`).

    python -m tasks.limits --gpus 1 [--registry crawler/sources.yaml] [--delay 1.0]
"""
from __future__ import annotations

import argparse

from crawler.registry import DEFAULT_REGISTRY, load_registry
from tasks.progress import host_limit_name


def create_limits(gpus: int, registry=DEFAULT_REGISTRY, delay: float = 1.0) -> dict:
    """Upsert the limits; returns {"gpu": gpus, "hosts": number of host limits}."""
    from prefect.client.orchestration import get_client
    from prefect.client.schemas.actions import GlobalConcurrencyLimitCreate, GlobalConcurrencyLimitUpdate
    from prefect.exceptions import ObjectAlreadyExists

    names = sorted({host_limit_name(h) for s in load_registry(registry) for h in s.hosts})
    with get_client(sync_client=True) as client:
        client.create_concurrency_limit(tag="gpu", concurrency_limit=gpus)
        for name in names:
            try:
                client.create_global_concurrency_limit(GlobalConcurrencyLimitCreate(
                    name=name, limit=1, slot_decay_per_second=1.0 / delay))
            except ObjectAlreadyExists:
                client.update_global_concurrency_limit(name, GlobalConcurrencyLimitUpdate(
                    limit=1, slot_decay_per_second=1.0 / delay))
    return {"gpu": gpus, "hosts": len(names)}


def main() -> None:
    ap = argparse.ArgumentParser()
    ap.add_argument("--gpus", type=int, default=1)
    ap.add_argument("--registry", default=str(DEFAULT_REGISTRY))
    ap.add_argument("--delay", type=float, default=1.0)
    args = ap.parse_args()
    print(create_limits(args.gpus, args.registry, args.delay))


if __name__ == "__main__":
    main()
