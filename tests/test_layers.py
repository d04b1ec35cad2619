"""Architecture guards: the library layers never import prefect or a layer above them, no import circle
between the repo's modules, and every declared read of every stage is waited on by the main flow."""
import ast
import subprocess
import sys
from pathlib import Path

from tests.conftest import REPO

# Layer order (lower first): a library imports only its own package and the libraries below it. flows/ops/tasks
# are above every library; bench/scripts/tests are outside the layering.
LIBRARY_ORDER = {"storage": 0, "crawler": 1, "corpus": 1, "model": 2, "retrieval": 3, "answers": 4}
ABOVE_LIBRARIES = {"tasks", "flows", "ops", "prefect", "prefect_dask"}
# corpus reads the documents contract of crawler's importers (corpus.stages: import stage)
ALLOWED_SIDEWAYS = {("corpus", "crawler")}
OUTSIDE = {"tests", "bench", "scripts", ".venv", "build"}
# the retrieval restructure (one Retriever, version store apart from the index build) removes this circle;
# no other may appear
KNOWN_CIRCLES: list[list[str]] = []


def _packages() -> list[str]:
    """Every package directory at the repo root (a folder with ``__init__.py``), outside tests/bench/scripts."""
    return sorted(p.name for p in REPO.iterdir() if (p / "__init__.py").is_file() and p.name not in OUTSIDE)


def _module_name(path: Path) -> str:
    rel = path.relative_to(REPO).with_suffix("")
    parts = rel.parts[:-1] if rel.name == "__init__" else rel.parts
    return ".".join(parts)


def _imports(path: Path) -> set[str]:
    """Dotted modules a file imports, module level and inside functions (relative imports resolved)."""
    from storage.contracts import _imports as imports_of

    return imports_of(path, _module_name(path))


def _modules() -> dict[str, Path]:
    return {_module_name(f): f for pkg in _packages() for f in sorted((REPO / pkg).rglob("*.py"))}


def test_every_package_is_placed_in_the_layers():
    """A new package must be placed: as a library (in LIBRARY_ORDER) or as an upper layer."""
    assert set(_packages()) <= set(LIBRARY_ORDER) | ABOVE_LIBRARIES, set(_packages()) - set(LIBRARY_ORDER) - ABOVE_LIBRARIES


def test_libraries_import_no_prefect_and_no_higher_layer():
    """AST walk of every module of every library package (imports inside functions count)."""
    bad = []
    for mod, path in _modules().items():
        pkg = mod.split(".")[0]
        if pkg not in LIBRARY_ORDER:
            continue
        for imp in _imports(path):
            top = imp.split(".")[0]
            if top in ABOVE_LIBRARIES or (top in LIBRARY_ORDER and top != pkg and (pkg, top) not in ALLOWED_SIDEWAYS
                                          and LIBRARY_ORDER[top] >= LIBRARY_ORDER[pkg]):
                bad.append(f"{mod} imports {imp}")
    assert not bad, "\n".join(sorted(set(bad)))


def test_layer_check_catches_an_upward_import(tmp_path):
    """The check above is not vacuous: a library file importing prefect or tasks is found."""
    f = tmp_path / "m.py"
    f.write_text("import os\n\ndef f():\n    from prefect import task\n    import tasks.stages\n")
    from storage.contracts import _imports as imports_of

    assert {"prefect", "tasks.stages"} <= imports_of(f, "storage.m")


def _cycles(graph: dict[str, set[str]]) -> list[list[str]]:
    """Import circles: strongly connected components with more than one module (networkx)."""
    import networkx as nx

    g = nx.DiGraph([(m, d) for m, deps in graph.items() for d in deps])
    return sorted(sorted(c) for c in nx.strongly_connected_components(g) if len(c) > 1)


def import_graph() -> dict[str, set[str]]:
    """In-repo module -> in-repo modules it imports (module level and function level; ``from pkg import mod``
    counts as importing ``pkg.mod``; importing a package's module does not count its ``__init__``)."""
    mods = _modules()
    return {m: {i for i in _imports(p) if i in mods and i != m} for m, p in mods.items()}


def test_cycle_finder_finds_a_cycle():
    assert _cycles({"a": {"b"}, "b": {"c"}, "c": {"a"}, "d": {"a"}}) == [["a", "b", "c"]]
    assert _cycles({"a": {"b"}, "b": set()}) == []


def test_no_import_circle_between_modules():
    """No two in-repo modules import each other, directly or through others (package ``__init__`` files that
    re-export their modules are left out: importing ``pkg.mod`` through them is not a circle of code)."""
    graph = {m: {i for i in deps if not _is_init(i)} for m, deps in import_graph().items() if not _is_init(m)}
    cycles = [c for c in _cycles(graph) if c not in KNOWN_CIRCLES]
    assert not cycles, cycles


def _is_init(mod: str) -> bool:
    return (REPO.joinpath(*mod.split(".")) / "__init__.py").is_file()


def test_library_layers_do_not_import_prefect_at_import_time():
    """Importing every library module loads no prefect module (the AST test above also sees lazy imports)."""
    mods = [m for m in _modules() if m.split(".")[0] in LIBRARY_ORDER and not m.endswith("__main__")] + ["ops.ui_check"]
    code = ("import importlib, sys\n"
            f"for m in {mods!r}:\n"
            "    importlib.import_module(m)\n"
            "bad = sorted(k for k in sys.modules if k == 'prefect' or k.startswith('prefect.'))\n"
            "print(len(bad))\n")
    out = subprocess.run([sys.executable, "-c", code], cwd=REPO, capture_output=True, text=True, timeout=300)
    assert out.returncode == 0, out.stderr[-2000:]
    assert out.stdout.strip() == "0"


def _dry_main_job():
    """The main job's stage calls, recorded instead of submitted (the flow's own grouping functions)."""
    from flows.profiles import get_profile
    from flows.stages import Run, corpus_stages, index_stages, model_stages

    def record(stage, data_dir, kwargs, wait_for, map_over=None, n=0, now=False):
        return (stage.name, len(run.dag.calls) - 1)  # waits() has just recorded this call

    run = Run(get_profile("tiny"), "/nonexistent", {}, submit=record)
    corpus_stages(run, str(REPO / "tests" / "policy_docs.csv"))
    model_stages(run)
    index_stages(run)
    return run


def test_every_declared_read_is_waited_on_by_the_main_flow():
    """Each read of each stage call has a producing call earlier in the generated DAG, and the call waits on
    it; the main job takes no table from outside (its only input is the corpus file)."""
    from flows.registry import PIPELINE

    run = _dry_main_job()
    assert run.dag.inputs == set(), run.dag.inputs
    called = [name for name, _, _ in run.dag.calls]
    assert set(called) == {s.name for s in PIPELINE} - {"crawl-source", "crawl"}
    for i, (name, reads, waited) in enumerate(run.dag.calls):
        for r in reads:
            writers = {s.name for s in PIPELINE if r in s.write_paths(".")}
            assert writers, f"no stage declares {r}, read by {name}"
            earlier = [j for j, (n, _, _) in enumerate(run.dag.calls[:i]) if n in writers]
            assert earlier, f"{name} reads {r} before any of {writers} is called"
            producer = (run.dag.calls[earlier[-1]][0], earlier[-1])
            assert producer in waited, f"{name} does not wait for {producer[0]} ({r})"
