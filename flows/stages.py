"""Groups of stage tasks that several flows share (called inside a flow, they add tasks to it).

- :func:`corpus_stages`: import or crawl -> clean -> sentences -> segment -> vocab -> datasets -> report
- :func:`model_stages`: pretraining data -> pretrain -> fine-tune on PolicySM-1
- :func:`index_stages`: index plan -> embedding mapped over parts -> publish -> retrieval evaluation

Nothing is wired by hand: a :class:`Run` submits each stage of its registry with the arguments its contract
names (settings from the ``PipelineConfig``, the flow's inputs, placeholders) and makes it wait for the
stages of this run that produce what it reads (:class:`Dag`). A read no stage of the run produces is an
input of the flow (already on disk, e.g. the corpus when a deployment rebuilds only the model).

Segmentation and embedding are mapped over partitions (``segment_parts``, ``embed_parts``) and run in
parallel on the flow's task runner (threads by default, Dask workers with ``--dask``); the merge steps
assemble the parts in order, so the outputs are the same whatever the runner. Every stage task is declared
as materializing its outputs (``file://`` asset keys under the data dir), so each run emits asset events.
"""
from __future__ import annotations

from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Callable

from flows.profiles import PipelineConfig, setting
from flows.registry import PIPELINE
from storage.contracts import Registry, Stage


@dataclass
class Dag:
    """The stage calls of one run in submission order: which call produces each output, what each waited on.

    ``calls``: ``(stage name, reads, handles waited on)`` per call; ``inputs``: reads no earlier call produced.
    """

    producers: dict[str, Any] = field(default_factory=dict)
    calls: list[tuple[str, tuple[str, ...], list]] = field(default_factory=list)
    inputs: set[str] = field(default_factory=set)

    def waits(self, stage: Stage, params: dict) -> list:
        """Handles of the calls that produce ``stage``'s reads (filled from ``params``); the rest are inputs."""
        reads = tuple(stage.read_paths(".", params))
        self.inputs.update(r for r in reads if r not in self.producers)
        handles = list({id(h): h for h in (self.producers[r] for r in reads if r in self.producers)}.values())
        self.calls.append((stage.name, reads, handles))
        return handles

    def produced(self, outputs, handle) -> None:
        """Record ``handle`` as the producer of ``outputs`` (names)."""
        self.producers.update({o: handle for o in outputs})


def prefect_submit(stage: Stage, data_dir: str, kwargs: dict, wait_for: list, map_over: str | None = None,
                   n: int = 0, now: bool = False):
    """Submit ``stage``'s task (:func:`tasks.stages.task_for`) with ``kwargs``; mapped over ``range(n)`` in
    parameter ``map_over``; called in the flow's thread with ``now``. Stages with outputs materialize them."""
    from prefect import unmapped

    from tasks.assets import materializing
    from tasks.stages import task_for

    task = task_for(stage)
    if stage.writes:
        task = materializing(task, stage, data_dir, **{k: kwargs[k] for k in stage.defaults if k in kwargs})
    if map_over:
        fixed = {k: unmapped(v) for k, v in kwargs.items()}
        return task.map(data_dir=unmapped(data_dir), **{**fixed, map_over: range(n)}, wait_for=wait_for)
    return (task if now else task.submit)(data_dir=data_dir, **kwargs, wait_for=wait_for)


@dataclass
class Run:
    """One flow's stage calls: config, data dir, the flow's inputs (``input_path``, ``stopwords``, backbones...),
    the registry, the DAG so far and how a call is submitted (:func:`prefect_submit`)."""

    cfg: PipelineConfig
    data_dir: str
    inputs: dict = field(default_factory=dict)
    stages: Registry = PIPELINE
    dag: Dag = field(default_factory=Dag)
    submit: Callable = prefect_submit

    def kwargs(self, stage: Stage, params: dict) -> dict:
        """The task's arguments: settings from the config, then the flow's inputs, then ``params``."""
        out = {p: setting(self.cfg, f) for p, f in stage.settings.items()}
        out.update({p: self.inputs.get(p) for p in (*stage.inputs, *stage.files) if p not in out})
        return {**out, **params}

    def stage(self, name: str, now: bool = False, **params):
        """Submit stage ``name`` after the producers of its reads; returns its future (its result with ``now``)."""
        stage = self.stages.named(name)
        kw = self.kwargs(stage, params)
        handle = self.submit(stage, self.data_dir, kw, self.dag.waits(stage, kw), now=now)
        self.dag.produced(stage.write_paths(".", kw), handle)
        return handle

    def mapped(self, plan: str, part: str, merge: str, n_parts: int, plan_to_merge: bool = False, **params):
        """Plan -> ``n_parts`` parts -> merge: each part gets the plan as ``plan`` (so its cache key sees exactly
        what it will do) and its index as ``part``; the merge gets the parts' records in order as ``parts`` and,
        where its contract takes it, the plan (``Stage.takes_parts``). With ``plan_to_merge`` the plan and the
        merge are called in the flow's thread (their results are values, not futures)."""
        plan_h = self.stage(plan, now=plan_to_merge, **params)
        p, m = self.stages.named(part), self.stages.named(merge)
        kw = self.kwargs(p, {**params, "plan": plan_h})
        parts = self.submit(p, self.data_dir, kw, self.dag.waits(p, kw), map_over="part", n=n_parts)
        taken = {"plan": plan_h} if m.takes_parts.get("plan") == plan else {}
        return self.stage(merge, now=plan_to_merge, parts=parts, **taken, **params)


def _sibling(path: str, name: str) -> str | None:
    p = Path(path).parent / name
    return str(p) if p.is_file() else None


def corpus_stages(run: Run, input: str, registry: str | None = None, refresh: bool = False) -> dict:
    """Text stages; ``input`` is a CSV export, a JSON Lines / Parquet file read with the column mapping
    ``run.inputs["columns"]``, or ``"crawl"``. Every stage is submitted to the flow's task runner. Returns the
    stage futures by name (the crawl's merge stats as a value)."""
    r: dict = {}
    if input == "crawl":
        from flows.crawl import crawl_sources

        r["import"] = crawl_sources(run.data_dir, registry, refresh)
        run.dag.produced(run.stages.named("crawl").write_paths("."), r["import"])
    else:
        run.inputs["sources_csv"] = run.inputs.get("sources_csv") or _sibling(input, "policy_sources.csv")
        run.inputs["input_path"] = str(Path(input).resolve())
        r["import"] = run.stage("import-documents")
    run.inputs["stopwords"] = run.inputs.get("stopwords") or (None if input == "crawl" else _sibling(input, "stopwords.txt"))
    from crawler.registry import DEFAULT_REGISTRY  # the sources' owners for the policy records

    run.inputs["registry"] = run.inputs.get("registry") or registry or str(DEFAULT_REGISTRY)
    for key, name in (("clean", "clean"), ("sentences", "sentences")):
        r[key] = run.stage(name)
    r["segment"] = run.mapped("segment-plan", "segment-part", "segment", run.cfg.segment_parts)
    for key, name in (("vocab", "vocab"), ("datasets", "datasets"), ("report", "dataset-report"),
                      ("policy_records", "policy-records")):
        r[key] = run.stage(name)
    return r


def model_stages(run: Run) -> dict:
    """Pretraining data, pretraining and fine-tuning on PolicySM-1 (reads the text stages' outputs)."""
    if run.cfg.backbone.kind == "e5" and not run.inputs.get("e5_file"):  # its content enters the cache key
        from model.e5_format import package_model_path

        run.inputs["e5_file"] = str(package_model_path())
    return {"backbone": run.stage("backbone", now=True), "pretrain_data": run.stage("pretrain-data", now=True),
            "pretrain": run.stage("pretrain", now=True),
            "finetune": run.stage("finetune", now=True)}


def part_setting(cfg, name: str):
    """The value of serving-part setting ``name``: the config's field of that name, else its ``part_files``
    entry (a part declared without a config field), else ""."""
    return getattr(cfg, name, "") or cfg.part_files.get(name, "")


def serving_part_files(run: Run) -> None:
    """Give the index stage the files of its serving parts as inputs (their content enters its cache key): the
    inputs each declared part reads (:mod:`retrieval.serving_parts`) set in the run's config, relative paths
    resolved from the repository root: ``answer_reranker``, ``answer_scorer`` and ``reranker`` (installed) or,
    with
    ``answer_questions`` set, the question set the answer scorer is fitted on instead (:mod:`answers.stages`),
    and the pair file or corpus the related-policies model trains on (:func:`docmatch.stage.related_part`; a
    missing default corpus publishes without that part, said on the console).

    A part declared without a config field gets its file from ``part_files`` (:func:`part_setting`).

    Raises:
        FileNotFoundError: the configured question set, answer cross-encoder, pair file or a ``part_files``
            file does not exist.
        ValueError: the index stage's contract does not take the question set; a ``part_files`` key no
            declared part reads.
    """
    from retrieval.serving_parts import serving_parts

    repo = Path(__file__).resolve().parent.parent
    declared = serving_parts()
    unknown = sorted(set(run.cfg.part_files) - {i for p in declared for i in p.inputs})
    if unknown:
        raise ValueError(f"part_files: no serving part reads {unknown} (declared settings: "
                         f"{sorted({i for p in declared for i in p.inputs})})")
    if not all(isinstance(v, str) for v in run.cfg.part_files.values()):
        raise ValueError(f"part_files: every value is a file path, got {run.cfg.part_files}")
    for p in declared:  # a part fitted on a setting given is not installed from its file too
        fitting = any(part_setting(run.cfg, f) for f in p.fit_settings)
        for name in p.inputs:
            if name in (p.setting, p.fallback_setting) and fitting:
                continue
            if part_setting(run.cfg, name) and not run.inputs.get(name):
                run.inputs[name] = str(repo / part_setting(run.cfg, name))
    for name, value in run.cfg.part_files.items():
        if value and not Path(run.inputs[name]).is_file():
            raise FileNotFoundError(f"part_files.{name}: part file {run.inputs[name]} not found")
    if run.cfg.answer_reranker and not Path(run.inputs["answer_reranker"]).is_file():
        raise FileNotFoundError(f"answer_reranker: part file {run.inputs['answer_reranker']} not found")
    if run.cfg.related_pairs and not Path(run.inputs["related_pairs"]).is_file():
        raise FileNotFoundError(f"related_pairs: pair file {run.inputs['related_pairs']} not found")
    if run.inputs.get("related_corpus") and not Path(run.inputs["related_corpus"]).is_file():
        print(f"related_corpus {run.inputs['related_corpus']} not found: versions are published without the "
              "related-policies part")
        run.inputs["related_corpus"] = ""
    if run.cfg.answer_questions:
        if not Path(run.inputs["answer_questions"]).is_file():
            raise FileNotFoundError(f"answer_questions: question file {run.inputs['answer_questions']} not found")
        if "answer_questions" not in run.stages.named("index").files:
            raise ValueError("answer_questions is set but the index stage's contract does not take a question file")


def index_stages(run: Run) -> dict:
    """Index refresh (only new/changed chunks embedded, the serving parts pinned in the version, the answer
    scorer fitted in it when ``answer_questions`` is set: :func:`serving_part_files`) and the retrieval
    evaluation."""
    serving_part_files(run)
    choice = run.stage("retrieval-encoder", now=True)
    idx = run.mapped("index-plan", "embed-part", "index", run.cfg.embed_parts, plan_to_merge=True)
    return {"retrieval_encoder": choice, "index": idx, "retrieval_eval": run.stage("evaluate-retrieval", now=True)}
