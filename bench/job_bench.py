"""The whole main job at 1x and 21x side by side, alone: every stage of ``flows.pipeline`` in the order of its
DAG, each in a fresh subprocess, with its wall time, CPU time and peak RSS, and the 21x / 1x ratios.

    python bench/job_bench.py [--sizes 1x,21x] [--profile cpu-scratch] [--set backbone.kind=none ...] [--json F]

Corpora as in ``bench/growth_bench.py`` (``1x``: the policy corpus; ``21x``: LawRefBook, 3,419 laws, 21x its
chars). Every stage is called from its contract in the pipeline's registry (``flows.registry.PIPELINE``,
arguments bound by :func:`storage.binding.bind` with the settings of the profile, as the Prefect task does),
without Prefect, so what is measured is the stage's own work; the two mapped stages run whole (segment:
``corpus.stages.segment_stage`` with the profile's parts; index: ``retrieval.stages.index_stage``, plan ->
every embedding part -> publish). Both sizes use the same profile, so the same training budget (steps).

Per stage: ``wall`` (``time.perf_counter``, s), ``cpu`` (``time.process_time``: all threads of the child,
s), ``peak`` (the child's ``VmHWM`` from ``/proc/self/status``, MB = 2^20 bytes, imports included; Linux)
and ``base`` (its RSS before the call: interpreter and imports). The last lines give the job's total wall
time, the largest peak, and the evaluation's share of the wall time.

``--set`` overrides as the pipeline's (``flows.profiles.with_settings``). With the default ``backbone.kind=none``
the index encoder is the fine-tuned PolicyBERT of the profile: embedding 33k chunks with the 12-layer e5 takes
hours on 2 cores, the work ``bench/embed_workers.py`` measures per worker.
"""
from __future__ import annotations

import sys
from pathlib import Path

REPO = Path(__file__).resolve().parent.parent
if str(REPO) not in sys.path[:1]:
    sys.path.insert(0, str(REPO))

import argparse
import json
import pickle
import shutil
import tempfile
import time

from bench.growth_bench import CORPORA, POLICY, _status_mb, run_stage

JOB = ("import-documents", "clean", "sentences", "segment", "vocab", "datasets", "dataset-report", "backbone",
       "pretrain-data", "pretrain", "finetune", "retrieval-encoder", "index", "evaluate-retrieval")


def _inputs(corpus, cfg) -> dict:
    """The flow's inputs for ``corpus`` (as ``flows.stages.corpus_stages`` / ``model_stages`` set them)."""
    inputs = {"input_path": str(corpus.path), "sources_csv": str(corpus.sources_csv) if corpus.sources_csv else None,
              "columns": corpus.columns, "stopwords": str(POLICY / "stopwords.txt")}
    if cfg.backbone.kind == "e5":
        from model.e5_format import package_model_path

        inputs["e5_file"] = str(package_model_path())
    return inputs


def _call(name: str, d: Path, cfg, inputs: dict):
    """Stage ``name`` on data dir ``d`` as a zero-argument function (imports done)."""
    from flows.profiles import setting
    from flows.registry import PIPELINE
    from storage.binding import bind, stage_function

    if name == "segment":
        from corpus.stages import segment_stage
        return lambda: segment_stage(d / "sentences", d / "segments", cfg.segmenter, cache_root=d / "cache" / "segments",
                                     n_parts=cfg.segment_parts)
    if name == "index":
        from retrieval.contracts import ENCODER
        from retrieval.stages import index_stage
        return lambda: index_stage(d / "documents_clean", d / ENCODER, d / "index", cfg.chunks, cfg.index,
                                   cfg.embed_batch_size, n_parts=cfg.embed_parts, sparse=cfg.sparse, fusion=cfg.fusion)
    stage = PIPELINE.named(name)
    params = {**stage.defaults, **{p: setting(cfg, f) for p, f in stage.settings.items()},
              **{p: inputs.get(p) for p in (*stage.inputs, *stage.files)}}
    fn = stage_function(stage)
    kwargs = bind(stage, fn, str(d), params)
    return lambda: fn(**kwargs)


def child(name: str, d: Path, args_file: Path) -> dict:
    """Run one stage in this (fresh) process; returns its measurements."""
    import corpus

    cfg, inputs = pickle.loads(args_file.read_bytes())
    fn = _call(name, d, cfg, inputs)
    base = _status_mb("VmRSS")
    t, c = time.perf_counter(), time.process_time()
    fn()
    return {"stage": name, "wall": time.perf_counter() - t, "cpu": time.process_time() - c, "base": base,
            "peak": _status_mb("VmHWM"), "library": corpus.__file__}


def bench_size(size: str, cfg, root: Path) -> dict:
    """Every stage of :data:`JOB` on corpus ``size`` into ``root/size``; returns {stage: report}."""
    d = root / size
    d.mkdir(parents=True)
    args_file = root / f"{size}.pkl"
    args_file.write_bytes(pickle.dumps((cfg, _inputs(CORPORA[size], cfg))))
    out = {}
    for name in JOB:
        out[name] = rep = run_stage(name, d, args_file, __file__)
        print(f"  {size:<4} {name:<19} wall {rep['wall']:8.1f} s  cpu {rep['cpu']:8.1f} s  peak {rep['peak']:7.0f} MB",
              flush=True)
    return out


def table(results: dict[str, dict]) -> str:
    """Per-stage figures of each size side by side, with the last size over the first."""
    sizes = list(results)
    a, b = sizes[0], sizes[-1]
    head = "stage                " + "".join(f"{s + ' wall s':>11}{s + ' cpu s':>10}{s + ' peak MB':>12}" for s in sizes)
    head += f"{'wall ' + b + '/' + a:>14}{'peak ' + b + '/' + a:>14}" if len(sizes) > 1 else ""
    lines = [head]
    for name in JOB:
        row = f"{name:<21}" + "".join(f"{results[s][name]['wall']:11.1f}{results[s][name]['cpu']:10.1f}"
                                       f"{results[s][name]['peak']:12.0f}" for s in sizes)
        if len(sizes) > 1:
            row += f"{results[b][name]['wall'] / max(results[a][name]['wall'], 1e-9):14.2f}"
            row += f"{results[b][name]['peak'] / max(results[a][name]['peak'], 1e-9):14.2f}"
        lines.append(row)
    for s in sizes:
        total = sum(r["wall"] for r in results[s].values())
        peak = max(results[s].items(), key=lambda kv: kv[1]["peak"])
        share = results[s]["evaluate-retrieval"]["wall"] / total
        lines.append(f"{s}: job wall {total / 60:.1f} min, largest peak {peak[1]['peak']:.0f} MB ({peak[0]}), "
                     f"evaluation {share:.1%} of the wall time")
    return "\n".join(lines)


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--sizes", default="1x,21x")
    ap.add_argument("--profile", default="cpu-scratch")
    ap.add_argument("--set", action="append", default=None, dest="settings", metavar="FIELD=VALUE",
                    help="profile overrides as the pipeline's (default: backbone.kind=none; any --set replaces it)")
    ap.add_argument("--json", default=None, help="also write the figures as JSON")
    ap.add_argument("--stage", help=argparse.SUPPRESS)
    ap.add_argument("--data-dir", help=argparse.SUPPRESS)
    ap.add_argument("--args-file", help=argparse.SUPPRESS)
    args = ap.parse_args(argv)
    if args.stage:
        print(json.dumps(child(args.stage, Path(args.data_dir), Path(args.args_file))))
        return 0
    from flows.profiles import get_profile, with_settings

    cfg = with_settings(get_profile(args.profile), args.settings or ["backbone.kind=none"])
    sizes = [s.strip() for s in args.sizes.split(",") if s.strip()]
    unknown = [s for s in sizes if s not in CORPORA]
    if unknown:
        ap.error(f"unknown sizes {unknown} (known: {', '.join(CORPORA)})")
    root = Path(tempfile.mkdtemp(prefix="bench-job-"))
    try:
        print(f"profile {args.profile}, settings {args.settings or ['backbone.kind=none']}; scratch {root}", flush=True)
        results = {s: bench_size(s, cfg, root) for s in sizes}
    finally:
        shutil.rmtree(root, ignore_errors=True)
    print(table(results))
    if args.json:
        Path(args.json).write_text(json.dumps(results, indent=1))
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
