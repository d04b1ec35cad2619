"""Architecture guards: the library layers never import prefect or a layer above them, no import circle
between the repo's modules, every declared read of every stage is waited on by the main flow, modules and
functions stay small, and docstrings cite the SPEC or papers, never the issue tracker."""
import ast
import io
import re
import subprocess
import sys
import tokenize
from pathlib import Path

from tests.conftest import REPO

# Layer order (lower first): a library imports only its own package and the libraries below it. flows/ops/tasks
# are above every library; bench/scripts/tests are outside the layering.
LIBRARY_ORDER = {"storage": 0, "crawler": 1, "corpus": 1, "policy": 1, "model": 2, "retrieval": 3, "docmatch": 4,
                 "answers": 5,
                 "evaluation": 6}
ABOVE_LIBRARIES = {"tasks", "flows", "ops", "prefect", "prefect_dask"}
# corpus reads the documents contract of crawler's importers (corpus.stages: import stage)
ALLOWED_SIDEWAYS = {("corpus", "crawler"), ("policy", "crawler"), ("policy", "corpus")}
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


# ---------------------------------------------------------------- size and citations

MAX_EXTRACT_LINES = 400
LONG_FUNCTION = 50          # lines (end_lineno - lineno + 1, decorators not counted)
MAX_LONG_FUNCTIONS = 8      # library functions longer than LONG_FUNCTION
# A citation of the issue tracker rather than the SPEC: "issue: crawler", "issues: retrieval, 12", "issue #12",
# "item 4", "the tracker", "ticket 7", "PR #3", a bare "#12".
TRACKER = re.compile(
    r"\bissues?\s*(?::|#\s*\d+|\d+)"
    r"|\bitems?\s+\d+(?:\s*[-–]\s*\d+)?\b"
    r"|\b(?:the|issue|bug)\s+tracker\b"
    r"|\b(?:tickets?|PRs?|pull\s+requests?)\s*#?\d+"
    r"|(?<![\w&#/])#\d{1,5}\b(?![\w-])",
    re.I)


def test_extract_module_keeps_only_the_entry_points():
    """crawler/extract.py is the entry point and CLI; encodings, HTML, chrome and PDF live in their own modules."""
    n = len((REPO / "crawler" / "extract.py").read_text(encoding="utf-8").splitlines())
    assert n <= MAX_EXTRACT_LINES, f"crawler/extract.py has {n} lines (at most {MAX_EXTRACT_LINES})"


def _docs_and_comments(source: str):
    """``(line, text)`` of every docstring (module, class, function) and every comment of a Python source."""
    for node in ast.walk(ast.parse(source)):
        if isinstance(node, (ast.Module, ast.ClassDef, ast.FunctionDef, ast.AsyncFunctionDef)):
            doc = ast.get_docstring(node, clean=False)
            if doc:
                yield node.body[0].lineno, doc
    for tok in tokenize.generate_tokens(io.StringIO(source).readline):
        if tok.type == tokenize.COMMENT:
            yield tok.start[0], tok.string


def tracker_citations(source: str) -> list[tuple[int, str]]:
    """``(line, match)`` of every tracker citation in the docstrings and comments of ``source``."""
    return [(line, m.group(0)) for line, text in _docs_and_comments(source) for m in TRACKER.finditer(text)]


def test_tracker_regex_catches_planted_citations_and_spares_prose():
    planted = ('"""Per-source partitions (issue: scheduled refreshes, item 4)."""\n'
               "def f():\n"
               '    """Benchmark (issues: retrieval, 12), see #42 and the tracker."""\n'
               "    return 1  # fixed in issue 17, PR #3\n")
    found = [m.lower() for _, m in tracker_citations(planted)]
    assert found == ["issue:", "item 4", "issues:", "#42", "the tracker", "issue 17", "pr #3"], found
    prose = ('"""Known issues with GBK pages: a wrong header (SPEC §2); items are scored 0..1; 3 items."""\n'
             'COLOR = "#222"  # the tracked item count, see §7\n')
    assert tracker_citations(prose) == []


def test_no_docstring_or_comment_cites_the_tracker():
    """Docstrings and comments cite SPEC sections or papers: an issue number or title means nothing to a reader
    of the code (every .py file of the repo outside tests/ and the virtualenv)."""
    bad = []
    for f in sorted(REPO.rglob("*.py")):
        rel = f.relative_to(REPO)
        if rel.parts[0] in {"tests", ".venv", "build"} or rel.parts[0].endswith(".egg-info"):
            continue
        bad += [f"{rel}:{line}: {m}" for line, m in tracker_citations(f.read_text(encoding="utf-8"))]
    assert not bad, "\n".join(bad)


def long_functions(paths) -> list[tuple[int, str]]:
    """``(length, "path:line:name")`` of every function or method over :data:`LONG_FUNCTION` lines in ``paths``,
    longest first."""
    out = []
    for f in paths:
        for node in ast.walk(ast.parse(f.read_text(encoding="utf-8"))):
            if isinstance(node, (ast.FunctionDef, ast.AsyncFunctionDef)):
                n = node.end_lineno - node.lineno + 1
                if n > LONG_FUNCTION:
                    out.append((n, f"{f.relative_to(REPO)}:{node.lineno}:{node.name}"))
    return sorted(out, reverse=True)


def test_long_function_count_measures_lines(tmp_path, monkeypatch):
    """A function of 50 lines is not long, a method of 51 is (decorators and the class not counted)."""
    import tests.test_layers as me

    body = "".join(f"    x{i} = {i}\n" for i in range(49))
    f = tmp_path / "m.py"
    f.write_text(f"def short():\n{body}\n\nclass C:\n    @staticmethod\n    def long():\n"
                 + "".join("    " + ln + "\n" for ln in body.splitlines()) + "        y = 1\n", encoding="utf-8")
    monkeypatch.setattr(me, "REPO", tmp_path)
    assert long_functions([f]) == [(51, "m.py:55:long")]  # lines 1-50: short; 55: def long


def test_few_long_library_functions():
    """At most :data:`MAX_LONG_FUNCTIONS` functions of the library packages are over :data:`LONG_FUNCTION` lines."""
    paths = [f for pkg in LIBRARY_ORDER for f in sorted((REPO / pkg).rglob("*.py"))]
    found = long_functions(paths)
    assert len(found) <= MAX_LONG_FUNCTIONS, "\n".join(f"{n} {where}" for n, where in found)


# ---------------------------------------------------------------- one home per name: no shims, one cache root

NOQA_F401 = re.compile(r"#\s*noqa\b.*\bF401\b")


def _repo_sources() -> list[Path]:
    """Every .py file of the repo outside the virtualenv and build outputs."""
    return [f for f in sorted(REPO.rglob("*.py"))
            if not ({".venv", "build", ".git"} & set(f.relative_to(REPO).parts))
            and not f.relative_to(REPO).parts[0].endswith(".egg-info")]


def _unused_import_lines(source: str) -> set[int]:
    """Lines of ``source`` whose comment silences F401 (an import kept for another module's callers)."""
    return {tok.start[0] for tok in tokenize.generate_tokens(io.StringIO(source).readline)
            if tok.type == tokenize.COMMENT and NOQA_F401.search(tok.string)}


def reexports(source: str) -> list[int]:
    """Lines of ``from x import names`` statements marked ``noqa: F401``: names handed on to other modules."""
    silenced = _unused_import_lines(source)
    return [n.lineno for n in ast.walk(ast.parse(source)) if isinstance(n, ast.ImportFrom)
            and silenced & set(range(n.lineno, n.end_lineno + 1))]


def is_shim(path: Path) -> bool:
    """A module, not a package ``__init__``, whose body is only a docstring and imports marked ``noqa: F401``:
    it defines nothing, it re-exports another module's names for old callers."""
    if path.name == "__init__.py":
        return False
    source = path.read_text(encoding="utf-8")
    body = [n for n in ast.parse(source).body if not (isinstance(n, ast.ImportFrom) and n.module == "__future__")]
    if body and isinstance(body[0], ast.Expr) and isinstance(body[0].value, ast.Constant):
        body = body[1:]  # the docstring
    silenced = _unused_import_lines(source)
    return bool(body) and all(isinstance(n, (ast.Import, ast.ImportFrom))
                              and silenced & set(range(n.lineno, n.end_lineno + 1)) for n in body)


def test_shim_detector_finds_a_planted_shim(tmp_path):
    """A docstring and re-exports is a shim; a package ``__init__``, a module with code, or one without the
    ``noqa`` marks is not; a re-export inside a module with code is found by :func:`reexports`."""
    shim = '"""Names kept for old callers."""\nfrom a.b import c, d  # noqa: F401\nfrom a.e import (f,  # noqa: F401\n    g)\n'
    (tmp_path / "pkg").mkdir()
    for name, text in {"shim.py": shim, "pkg/__init__.py": shim, "plain.py": "from a.b import c\n",
                       "code.py": shim + "X = 1\n"}.items():
        (tmp_path / name).write_text(text, encoding="utf-8")
    assert [is_shim(tmp_path / n) for n in ("shim.py", "pkg/__init__.py", "plain.py", "code.py")] == [
        True, False, False, False]
    assert reexports(shim + "X = 1\n") == [2, 3] and reexports("import model  # noqa: F401  (registers)\n") == []


def test_no_module_is_or_imports_a_shim():
    """Each name is imported from the module that defines it: no shim module exists, so none is imported."""
    shims = {_module_name(f): f for f in _repo_sources() if is_shim(f)}
    users = {m: sorted(_module_name(f) for f in _repo_sources() if m in _imports(f)) for m in shims}
    assert not shims, "\n".join(f"shim {m}, imported by {users[m]}" for m in shims)


def test_no_module_reexports_another_modules_names():
    """Outside package ``__init__`` files (a package's public API), no ``from x import name  # noqa: F401``."""
    bad = [f"{f.relative_to(REPO)}:{line}" for f in _repo_sources() if f.name != "__init__.py"
           for line in reexports(f.read_text(encoding="utf-8"))]
    assert not bad, "\n".join(bad)


CACHE_ROOT_FILE = Path("storage", "cache.py")


def user_cache_literals(source: str) -> list[int]:
    """Lines that find a user cache folder by themselves: ``Path.home()``, ``XDG_CACHE_HOME`` or a ``.cache``
    path component in a string (docstrings not counted)."""
    tree = ast.parse(source)
    docs = {id(n.body[0].value) for n in ast.walk(tree) if isinstance(n, (ast.Module, ast.ClassDef, ast.FunctionDef,
            ast.AsyncFunctionDef)) and ast.get_docstring(n, clean=False) is not None}
    out = []
    for n in ast.walk(tree):
        if isinstance(n, ast.Attribute) and n.attr == "home" and isinstance(n.value, ast.Name) and n.value.id == "Path":
            out.append(n.lineno)
        elif isinstance(n, ast.Constant) and isinstance(n.value, str) and id(n) not in docs and (
                "XDG_CACHE_HOME" in n.value or re.search(r"(^|[/\\~])\.cache($|[/\\])", n.value)):
            out.append(n.lineno)
    return sorted(out)


def test_cache_literal_detector_finds_planted_roots():
    planted = ('"""Kept under ~/.cache (docstring: not counted)."""\nfrom pathlib import Path\n'
               'a = Path.home() / ".cache"\nb = os.environ.get("XDG_CACHE_HOME")\nc = "~/.cache/x"\n'
               'd = ".cached"\ne = "/tmp/cache"\n')
    assert user_cache_literals(planted) == [3, 3, 4, 5]


def test_one_user_cache_root():
    """Only :func:`storage.cache.user_cache_root` finds the user cache folder (every .py file outside tests/)."""
    bad = [f"{f.relative_to(REPO)}:{line}" for f in _repo_sources()
           if f.relative_to(REPO).parts[0] != "tests" and f.relative_to(REPO) != CACHE_ROOT_FILE
           for line in user_cache_literals(f.read_text(encoding="utf-8"))]
    assert not bad, "\n".join(bad)
    assert user_cache_literals((REPO / CACHE_ROOT_FILE).read_text(encoding="utf-8"))


def test_file_sha256_is_defined_once():
    """One file hash: :func:`storage.hashing.file_sha256`."""
    found = [f"{f.relative_to(REPO)}:{n.lineno}" for f in _repo_sources()
             for n in ast.walk(ast.parse(f.read_text(encoding="utf-8")))
             if isinstance(n, (ast.FunctionDef, ast.AsyncFunctionDef)) and n.name == "file_sha256"]
    assert [w.split(":")[0] for w in found] == ["storage/hashing.py"], found
