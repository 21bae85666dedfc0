"""The package's import structure: data flows down the pipeline, nothing imports upward,
and no import cycle exists, function-level (lazy) imports included.

Read from the source with ``ast`` (nothing is imported), so a cycle hidden inside a
function body is found as surely as one at the top of a module.
"""

from __future__ import annotations

import ast
from pathlib import Path

import pytest

import silvanforge

ROOT = Path(silvanforge.__file__).parent

# The pipeline from its lowest level to its highest: a module may import its own level
# and those below, never one above (docs/ARCHITECTURE.md, "The pipeline").
LAYERS = [
    ("errors", "version", "progress", "cores"),
    ("model",),
    ("reference",),
    ("frontends",),
    ("hir",),
    ("schedule",),
    ("mir",),
    ("lir",),
    ("representations",),
    ("backends",),
    ("plan",),
    ("export",),  # a plan's kernels as a shared library; its ctypes loader
    ("runtime",),
    ("estimator",),  # compile_estimator: estimators' methods over a predictor
    ("bench",),
    ("tune",),
    ("shipping",),  # a predictor on an engine's workers
    ("dask", "spark", "ray"),  # the engines' helpers
    ("tabular", "demo"),  # the CLI's files (rows in, predictions out); its demo
    ("cli",),
    ("__init__",),
]
LEVEL = {part: level for level, parts in enumerate(LAYERS) for part in parts}


def module_name(path: Path) -> str:
    parts = ("silvanforge",) + path.relative_to(ROOT).with_suffix("").parts
    return ".".join(parts[:-1] if parts[-1] == "__init__" else parts)


def is_package(name: str) -> bool:
    return (ROOT.joinpath(*name.split(".")[1:]) / "__init__.py").exists()


def is_module(name: str) -> bool:
    rel = name.split(".")[1:]
    return bool(rel) and (ROOT.joinpath(*rel).with_suffix(".py").exists()
                          or is_package(name))


def imports_of(source: str, name: str, package: str) -> set[str]:
    """Every silvanforge module that module ``name`` (of ``package``, its text
    ``source``) imports, at any depth of its code."""
    tree = ast.parse(source, name)
    # What ``if TYPE_CHECKING:`` imports is never imported when the code runs.
    typing_only = {id(n) for block in ast.walk(tree) if isinstance(block, ast.If)
                   and getattr(block.test, "id", None) == "TYPE_CHECKING"
                   for stmt in block.body for n in ast.walk(stmt)}
    found = set()
    for node in ast.walk(tree):
        if id(node) in typing_only:
            continue
        if isinstance(node, ast.Import):
            found |= {a.name for a in node.names if a.name.startswith("silvanforge")}
        elif isinstance(node, ast.ImportFrom):
            if node.level:
                base = package.split(".")
                base = base[:len(base) - node.level + 1]
                source = ".".join(base + ([node.module] if node.module else []))
            else:
                source = node.module or ""
            if not source.startswith("silvanforge"):
                continue
            for alias in node.names:
                sub = f"{source}.{alias.name}"
                found.add(sub if is_module(sub) else source)
    found.discard(name)
    return found


def graph() -> dict[str, set[str]]:
    edges = {}
    for path in ROOT.rglob("*.py"):
        name = module_name(path)
        package = name if path.name == "__init__.py" else name.rsplit(".", 1)[0]
        edges[name] = imports_of(path.read_text(), name, package)
    return edges


def level(name: str) -> int:
    parts = name.split(".")
    return LEVEL["__init__" if len(parts) == 1 else parts[1]]


def test_every_part_of_the_package_has_a_level():
    unplaced = {n.split(".")[1] for n in graph() if "." in n} - set(LEVEL)
    assert not unplaced, f"add these to LAYERS: {sorted(unplaced)}"


def test_no_module_imports_a_higher_level():
    upward = sorted(f"{a} -> {b}" for a, deps in graph().items() for b in deps
                    if level(b) > level(a))
    assert not upward, "imports up the pipeline:\n" + "\n".join(upward)


def cycles(edges: dict[str, set[str]]) -> list[list[str]]:
    """The strongly connected components of more than one module (Tarjan)."""
    index: dict[str, int] = {}
    low: dict[str, int] = {}
    stack: list[str] = []
    on: set[str] = set()
    found: list[list[str]] = []

    def visit(v: str) -> None:
        index[v] = low[v] = len(index)
        stack.append(v)
        on.add(v)
        for w in edges.get(v, ()):
            if w not in index:
                visit(w)
                low[v] = min(low[v], low[w])
            elif w in on:
                low[v] = min(low[v], index[w])
        if low[v] == index[v]:
            component = []
            while True:
                w = stack.pop()
                on.discard(w)
                component.append(w)
                if w == v:
                    break
            if len(component) > 1:
                found.append(sorted(component))

    for v in sorted(edges):
        if v not in index:
            visit(v)
    return found


def test_no_import_cycle():
    found = cycles(graph())
    assert not found, "import cycles:\n" + "\n".join(" <-> ".join(c) for c in found)


@pytest.mark.parametrize("edges, expected", [
    ({"a": {"b"}, "b": {"a"}}, [["a", "b"]]),
    ({"a": {"b"}, "b": {"c"}, "c": set()}, []),
])
def test_the_cycle_finder_finds_cycles(edges, expected):
    assert cycles(edges) == expected


def test_lazy_and_relative_imports_are_seen():
    source = ("from ..errors import InputError\n"
              "def f():\n    from .. import runtime, __version__\n")
    assert imports_of(source, "silvanforge.tune.x", "silvanforge.tune") == {
        "silvanforge.errors", "silvanforge.runtime", "silvanforge"}
