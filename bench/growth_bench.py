"""Growth benchmark: each text / model-data stage's wall time, chars/s and peak memory
on corpora of growing size, side by side in one run, with each stage's growth exponent and per-char
cost ratio against the smallest corpus.

    python bench/growth_bench.py [--sizes 1x,statutes,21x] [--profile cpu-scratch] [--json growth.json]

Corpora (read-only, from ``../shared``):

- ``1x``: the policy corpus, ``corpus/policy_docs.csv`` (the CSV export, with its sources list);
- ``statutes``: the statute pool, ``qa/statutes.jsonl`` (13,003 articles; ``article_id``, ``law_title``);
- ``21x``: ``corpora/lawrefbook.jsonl.gz`` (3,419 laws and regulations, read gzipped by the importer).

Every corpus uses the policy corpus's ``stopwords.txt`` and the profile's stage configs. Each stage runs
the library stage function directly (no Prefect) into a scratch data dir per corpus, in a fresh
subprocess, so no stage inherits another's peak: the child reports the stage call's wall time
(``time.perf_counter``, seconds), its RSS before the call (``base_mb``: interpreter + imports) and the
process's peak RSS after it (``VmHWM`` of ``/proc/self/status``, MB = 2^20 bytes; Linux only).

Size is the chars of the imported documents' text. ``chars/s`` = corpus chars / stage seconds (the same
denominator for every stage). Growth exponent of a stage from corpus A to corpus B:
``log(t_B / t_A) / log(chars_B / chars_A)`` (1.0 = linear; SPEC-free, the usual empirical order of
growth); per-char cost ratio: ``(t_B / chars_B) / (t_A / chars_A)`` (1.0 = the same cost per char).
The exponent is also given for the stage's CPU time (``time.process_time``, all its threads), which a busy
machine disturbs less than wall time.

Stages (as ``tasks/stages.py`` calls them): import, clean, sentences, segment (plan -> parts -> merge,
``corpus.stages.segment_stage`` with the profile's ``segment_parts`` and a segmentation cache, cold),
vocab, datasets (PolicySM-1/2 + probe), report, tokenizer (``model.stages.tokenizer_stage``) and
pretrain-data (``model.stages.pretrain_data_stage``, the profile's epochs, split by document as
``pretrain_inputs_stage`` does).
"""
from __future__ import annotations

import sys
from pathlib import Path

REPO = Path(__file__).resolve().parent.parent
if str(REPO) not in sys.path[:1]:  # import the library of the checkout this file lives in (a worktree too)
    sys.path.insert(0, str(REPO))

import argparse
import json
import math
import pickle
import shutil
import subprocess
import tempfile
import time
from dataclasses import dataclass, field

SHARED = REPO.parent / "shared"
POLICY = SHARED / "corpus"


@dataclass(frozen=True)
class Corpus:
    """One benchmark corpus: ``path`` (CSV export or JSON Lines, gzipped or not), its column mapping
    (:class:`crawler.records_import.ColumnMapping` fields; None for the CSV export) and sources list."""

    name: str
    path: Path
    columns: dict | None = None
    sources_csv: Path | None = None


CORPORA = {
    "1x": Corpus("1x", POLICY / "policy_docs.csv", None, POLICY / "policy_sources.csv"),
    "statutes": Corpus("statutes", SHARED / "qa" / "statutes.jsonl",
                       {"id_column": "article_id", "title_column": "law_title", "text_column": "text"}),
    "21x": Corpus("21x", SHARED / "corpora" / "lawrefbook.jsonl.gz",
                  {"id_column": "id", "title_column": "title", "text_column": "text"}),
}
STAGE_NAMES = ("import", "clean", "sentences", "segment", "vocab", "datasets", "report", "tokenizer",
               "pretrain-data")
TEXT_STAGES = STAGE_NAMES[:7]


@dataclass(frozen=True)
class StageArgs:
    """What a stage child needs besides the data dir: the corpus and the profile's configs (pickled to
    the child, so a text stage's process never imports the model code)."""

    corpus: Corpus
    stopwords: str
    configs: dict = field(default_factory=dict)


def _status_mb(field_name: str) -> float:
    """A memory field of /proc/self/status (``VmRSS``: resident now, ``VmHWM``: peak resident of this
    process image) in MB (Linux). ``ru_maxrss`` is not used: across ``exec`` Linux carries the parent's
    peak into it, so a child forked from a big parent would report the parent's peak."""
    for line in Path("/proc/self/status").read_text().splitlines():
        if line.startswith(field_name + ":"):
            return int(line.split()[1]) / 1024
    raise RuntimeError(f"no {field_name} in /proc/self/status (Linux only)")


def _stage_call(name: str, d: Path, a: StageArgs):
    """The library call of stage ``name`` on data dir ``d`` (a zero-argument function), imports done."""
    c = a.configs
    if name == "import":
        from corpus.stages import import_documents
        return lambda: import_documents(a.corpus.path, d / "documents", a.corpus.sources_csv, columns=a.corpus.columns)
    if name == "clean":
        from corpus.stages import clean_stage
        return lambda: clean_stage(d / "documents", d / "documents_clean", d / "rejects", c["clean"])
    if name == "sentences":
        from corpus.stages import sentences_stage
        return lambda: sentences_stage(d / "documents_clean", d / "sentences", c["sentences"])
    if name == "segment":
        from corpus.stages import segment_stage
        return lambda: segment_stage(d / "sentences", d / "segments", c["segmenter"],
                                     cache_root=d / "cache" / "segments", n_parts=c["segment_parts"])
    if name == "vocab":
        from corpus.stages import vocab_stage
        return lambda: vocab_stage(d / "segments", d / "vocab", a.stopwords, c["vocab"])
    if name == "datasets":
        from corpus.stages import DATASETS, datasets_stage
        return lambda: datasets_stage(d / "sentences", d / "documents_clean", DATASETS.write_paths(d), c["pairs"])
    if name == "report":
        from corpus.report import build_report
        from corpus.stages import REPORT
        return lambda: build_report(REPORT.read_paths(d), d / "report")
    if name == "tokenizer":
        from model.stages import tokenizer_stage
        return lambda: tokenizer_stage(d / "sentences", d / "tokenizer", None)
    if name == "pretrain-data":
        from corpus.stages import document_splits
        from model.stages import pretrain_data_stage
        return lambda: pretrain_data_stage(d / "sentences", d / "segments", d / "vocab", d / "tokenizer",
                                           document_splits(d / "documents_clean", c["pairs"]), d / "pretrain",
                                           c["pretrain_data"], c["pretrain_epochs"])
    raise ValueError(f"unknown stage {name!r} (known: {', '.join(STAGE_NAMES)})")


def _doc_chars(d: Path) -> tuple[int, int]:
    from storage import read_table

    texts = read_table(d / "documents", ["text"])["text"]
    return int(len(texts)), int(texts.str.len().sum())


def child(name: str, d: Path, args_file: Path) -> dict:
    """Run one stage in this (fresh) process; returns its measurements (see the module docstring)."""
    import corpus

    a = pickle.loads(args_file.read_bytes())
    fn = _stage_call(name, d, a)
    base = _status_mb("VmRSS")
    t, c = time.perf_counter(), time.process_time()
    fn()
    secs, cpu = time.perf_counter() - t, time.process_time() - c
    out = {"stage": name, "seconds": secs, "cpu_seconds": cpu, "base_mb": base,
           "peak_mb": _status_mb("VmHWM"), "library": corpus.__file__}
    if name == "import":
        out["docs"], out["chars"] = _doc_chars(d)
    return out


def run_stage(name: str, d: Path, args_file: Path, script: str | Path = __file__) -> dict:
    """Stage ``name`` in a fresh subprocess of ``script`` (this one by default; called with ``--stage``);
    returns its JSON report (the last line it prints).

    Raises:
        RuntimeError: the child failed (its stderr tail in the message) or imported the library from
            another checkout than this file's.
    """
    res = subprocess.run([sys.executable, str(Path(script).resolve()), "--stage", name, "--data-dir", str(d),
                          "--args-file", str(args_file)], capture_output=True, text=True, cwd=REPO)
    if res.returncode != 0:
        raise RuntimeError(f"stage {name} failed ({res.returncode}): {res.stderr[-2000:]}")
    rep = json.loads(res.stdout.strip().splitlines()[-1])
    if not rep["library"].startswith(str(REPO) + "/"):
        raise RuntimeError(f"stage {name} imported {rep['library']}, not the checkout at {REPO}")
    return rep


def profile_configs(profile: str) -> dict:
    """The stage configs of a run profile (``flows.profiles``), by the names :func:`_stage_call` uses."""
    from flows.profiles import get_profile

    p = get_profile(profile)
    return {"clean": p.clean, "sentences": p.sentences, "segmenter": p.segmenter, "segment_parts": p.segment_parts,
            "vocab": p.vocab, "pairs": p.pairs, "pretrain_data": p.pretrain_data, "pretrain_epochs": p.pretrain_epochs}


def bench_corpus(c: Corpus, configs: dict, stages: tuple[str, ...], root: Path, say) -> dict:
    """Every stage of ``stages`` on corpus ``c`` in order, each in its own process, into ``root/c.name``.
    Returns ``{"corpus", "path", "docs", "chars", "stages": {name: report}}``."""
    d = root / c.name
    d.mkdir(parents=True)
    out = {"corpus": c.name, "path": str(c.path), "stages": {}}
    for name in stages:
        needed = {k: v for k, v in configs.items() if k not in ("pretrain_data",) or name == "pretrain-data"}
        args_file = root / f"{c.name}-{name}.pkl"
        args_file.write_bytes(pickle.dumps(StageArgs(c, str(POLICY / "stopwords.txt"), needed)))
        rep = run_stage(name, d, args_file)
        if name == "import":
            out["docs"], out["chars"] = rep["docs"], rep["chars"]
        out["stages"][name] = rep
        say(f"  {c.name:<9} {name:<14} {rep['seconds']:8.2f} s  peak {rep['peak_mb']:7.0f} MB")
    return out


def exponent(ta: float, tb: float, size_ratio: float) -> float:
    """``log(tb / ta) / log(size_ratio)``; nan when it is undefined (equal sizes, a zero time)."""
    return math.log(tb / ta) / math.log(size_ratio) if size_ratio != 1 and ta > 0 and tb > 0 else float("nan")


def growth(a: dict, b: dict, stage: str) -> tuple[float, float, float, float]:
    """(growth exponent of wall time, of CPU time, per-char cost ratio of wall time, of CPU time) of ``stage``
    from corpus result ``a`` to ``b``. The CPU figures are the ones to trust on a busy machine (wall time
    there includes waiting for a core)."""
    sa, sb = a["stages"][stage], b["stages"][stage]
    size = b["chars"] / a["chars"]
    return (exponent(sa["seconds"], sb["seconds"], size), exponent(sa["cpu_seconds"], sb["cpu_seconds"], size),
            (sb["seconds"] / b["chars"]) / (sa["seconds"] / a["chars"]),
            (sb["cpu_seconds"] / b["chars"]) / (sa["cpu_seconds"] / a["chars"]))


def table(results: list[dict], stages: tuple[str, ...]) -> str:
    """The side-by-side table: per corpus wall seconds, kchars/s and peak MB; per later corpus the growth
    exponents of wall and CPU time (``exp``, ``cpu``) and the per-char cost ratios of wall and CPU time
    (``cost×``, ``cpu×``) against the first corpus; a total row (sums; the largest peak)."""
    base = results[0]
    head = "stage".ljust(14) + "".join(f"| {r['corpus']:>8} s  kch/s  peakMB " for r in results)
    head += "".join(f"| {r['corpus']}/{base['corpus']:<3} exp   cpu  cost×  cpu× " for r in results[1:])
    lines = [" " * 14 + "".join(f"| {r['docs']:>6} docs {r['chars'] / 1e6:7.2f} Mch " for r in results), head,
             "-" * len(head)]
    for s in stages:
        row = s.ljust(14)
        for r in results:
            st = r["stages"][s]
            row += f"| {st['seconds']:10.2f} {r['chars'] / st['seconds'] / 1e3:6.0f} {st['peak_mb']:7.0f} "
        for r in results[1:]:
            e, ec, k, kc = growth(base, r, s)
            row += f"| {e:13.2f} {ec:5.2f} {k:6.2f} {kc:5.2f} ".ljust(
                len(f"| {r['corpus']}/{base['corpus']:<3} exp   cpu  cost×  cpu× "))
        lines.append(row)
    tot = "total".ljust(14)
    for r in results:
        t = sum(r["stages"][s]["seconds"] for s in stages)
        tot += f"| {t:10.2f} {r['chars'] / t / 1e3:6.0f} {max(r['stages'][s]['peak_mb'] for s in stages):7.0f} "
    for r in results[1:]:
        ta, tb = (sum(x["stages"][s]["seconds"] for s in stages) for x in (base, r))
        ca, cb = (sum(x["stages"][s]["cpu_seconds"] for s in stages) for x in (base, r))
        size = r["chars"] / base["chars"]
        tot += (f"| {exponent(ta, tb, size):13.2f} {exponent(ca, cb, size):5.2f} "
                f"{(tb / r['chars']) / (ta / base['chars']):6.2f} {(cb / r['chars']) / (ca / base['chars']):5.2f} ")
    lines.append(tot)
    return "\n".join(lines)


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--sizes", default="1x,statutes,21x", help=f"comma-separated corpora of {', '.join(CORPORA)}; "
                                                              "the first is the base of the ratios")
    ap.add_argument("--stages", default=",".join(STAGE_NAMES), help="comma-separated stages (a prefix of the order)")
    ap.add_argument("--profile", default="cpu-scratch", help="run profile whose stage configs are used")
    ap.add_argument("--json", default=None, help="also write the results (per corpus, per stage) to this file")
    ap.add_argument("--render", default=None, metavar="JSON", help="print the table of a saved --json file and exit")
    ap.add_argument("--keep", default=None, help="keep the scratch data dirs under this folder (default: removed)")
    ap.add_argument("--stage", help=argparse.SUPPRESS)
    ap.add_argument("--data-dir", help=argparse.SUPPRESS)
    ap.add_argument("--args-file", help=argparse.SUPPRESS)
    args = ap.parse_args(argv)
    if args.stage:  # child mode: one stage, one JSON line
        print(json.dumps(child(args.stage, Path(args.data_dir), Path(args.args_file))))
        return 0
    if args.render:
        saved = json.loads(Path(args.render).read_text())
        names = tuple(saved["results"][0]["stages"])
        print(f"growth bench, profile {saved['profile']}, library {saved['library']}")
        print(table(saved["results"], names))
        return 0
    sizes = [s.strip() for s in args.sizes.split(",") if s.strip()]
    stages = tuple(s.strip() for s in args.stages.split(",") if s.strip())
    unknown = [s for s in sizes if s not in CORPORA] + [s for s in stages if s not in STAGE_NAMES]
    if unknown or not sizes:
        ap.error(f"unknown corpus or stage: {', '.join(unknown) or '(none given)'}")
    if stages != STAGE_NAMES[:len(stages)]:
        ap.error(f"--stages must be a prefix of {','.join(STAGE_NAMES)} (each stage reads the previous ones)")
    missing = [str(CORPORA[s].path) for s in sizes if not CORPORA[s].path.is_file()]
    if missing:
        ap.error(f"corpus file not found: {', '.join(missing)}")
    configs = profile_configs(args.profile)
    root = Path(args.keep) if args.keep else Path(tempfile.mkdtemp(prefix="growth-bench-"))
    say = lambda m: print(m, file=sys.stderr, flush=True)  # noqa: E731
    say(f"library: {REPO}; python: {sys.executable}; scratch: {root}")
    try:
        results = [bench_corpus(CORPORA[s], configs, stages, root, say) for s in sizes]
    finally:
        if not args.keep:
            shutil.rmtree(root, ignore_errors=True)
    print(f"growth bench, profile {args.profile}, library {REPO} (wall s, kchars/s = corpus chars / s, "
          f"peak RSS MB of the stage's own process)")
    print(table(results, stages))
    if args.json:
        Path(args.json).write_text(json.dumps({"profile": args.profile, "library": str(REPO), "results": results,
                                               "growth": {r["corpus"]: {s: dict(zip(("exponent", "cpu_exponent",
                                                                                     "cost_ratio", "cpu_cost_ratio"),
                                                                                   growth(results[0], r, s)))
                                                                        for s in stages} for r in results[1:]}},
                                              indent=1))
    return 0


if __name__ == "__main__":
    sys.exit(main())
