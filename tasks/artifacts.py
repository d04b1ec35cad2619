"""Prefect artifacts some stages publish from their results (tables and Markdown in the UI), by stage name.

A stage without an entry publishes nothing beyond its assets; adding one is optional.
"""
from __future__ import annotations

from pathlib import Path
from typing import Any, Mapping


def _retrieval_evaluation(res: dict, outputs: Mapping[str, Path]) -> None:
    from prefect.artifacts import create_table_artifact

    create_table_artifact(table=res["table"], key="retrieval-evaluation",
                          description=f"Known-item search, {res['queries']} title/citation queries; "
                                      f"IVF recall@10 vs exact {res['ivf_recall@10_vs_exact']:.3f}, "
                                      f"HNSW {res['hnsw_recall@10_vs_exact']:.3f}")


def _dataset_report(rep: dict, outputs: Mapping[str, Path]) -> None:
    from prefect.artifacts import create_markdown_artifact, create_table_artifact

    create_markdown_artifact(markdown=rep["markdown"], key="dataset-report",
                             description=f"Dataset report; plots in {outputs['report']}")
    create_table_artifact(table=rep["pairs"], key="policysm-pairs", description="PolicySM pairs per split/kind/label")
    create_table_artifact(table=rep["probe"], key="shortcut-probe", description="Shortcut probe vs majority baseline")


PUBLISHERS = {"evaluate-retrieval": _retrieval_evaluation, "dataset-report": _dataset_report}


def publish(stage: str, result: Any, outputs: Mapping[str, Path]) -> None:
    """Publish the artifacts of ``stage`` from its ``result`` (its declared ``outputs`` by name); none: no-op."""
    if stage in PUBLISHERS:
        PUBLISHERS[stage](result, outputs)
