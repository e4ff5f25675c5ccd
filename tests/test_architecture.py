"""The import graph is the pipeline: no circle, and no import that runs back up the stages.

Every module under `kvwear` (its primitives and the stage folders it links) is parsed, and every
`import` of a kvwear module is an edge, wherever it stands (module level, inside a function, under
TYPE_CHECKING): a circle through a function-level import is still a circle. Each module belongs to
the first layer whose prefix names it; an edge may go to its own layer or a lower one only.
"""

from __future__ import annotations

import ast
from pathlib import Path

import pytest

REPO = Path(__file__).resolve().parents[1]

# Lowest first. Data flows workloads → policies → plan → devices (the emulator beneath them) →
# wear/capture → estimate → reports; the pipeline orchestrates every stage, the CLI drives it.
LAYERS: tuple[tuple[str, ...], ...] = (
    ("kvwear.errors", "kvwear.units", "kvwear.registry", "kvwear.tables", "kvwear.kv", "kvwear.children",
     "kvwear.memory", "kvwear.exclusive", "kvwear.records", "kvwear.values", "kvwear.jitcache", "kvwear"),
    ("kvwear.workloads",),
    ("kvwear.policies",),
    ("kvwear.harness.plan",),
    ("kvwear.emulator",),
    ("kvwear.harness.wear",),
    ("kvwear.harness.capture",),
    ("kvwear.harness.devices",),
    ("kvwear.harness.estimate",),
    ("kvwear.reports",),
    ("kvwear.harness.pipeline",),
    ("kvwear.harness.cli",),
    ("kvwear.harness",),
)
STAGE_FOLDERS = ("workloads", "policies", "emulator", "harness", "reports")


def _modules() -> dict[str, Path]:
    """Every module of the installed namespace, by name, from the checkout's folders."""
    out: dict[str, Path] = {}
    for path in sorted((REPO / "kvwear").glob("*.py")):
        out["kvwear" if path.stem == "__init__" else f"kvwear.{path.stem}"] = path
    for folder in STAGE_FOLDERS:
        for path in sorted((REPO / folder).rglob("*.py")):
            parts = list(path.relative_to(REPO).with_suffix("").parts)
            if parts[-1] == "__init__":
                parts.pop()
            out[".".join(["kvwear", *parts])] = path
    return out


MODULES = _modules()


def _resolve(name: str) -> str | None:
    """The kvwear module an imported name lives in (a name imported from a package may be a module)."""
    while name and name not in MODULES:
        name = name.rpartition(".")[0]
    return name or None


def _edges(module: str, path: Path) -> set[str]:
    tree = ast.parse(path.read_text(), str(path))
    is_pkg = path.name == "__init__.py"
    out: set[str] = set()
    for node in ast.walk(tree):
        targets: list[str] = []
        if isinstance(node, ast.Import):
            targets = [a.name for a in node.names]
        elif isinstance(node, ast.ImportFrom):
            base = node.module or ""
            if node.level:
                pkg = module if is_pkg else module.rpartition(".")[0]
                for _ in range(node.level - 1):
                    pkg = pkg.rpartition(".")[0]
                base = f"{pkg}.{base}" if base else pkg
            targets = [f"{base}.{a.name}" for a in node.names] or [base]
        for t in targets:
            if t.split(".")[0] in STAGE_FOLDERS:
                raise AssertionError(f"{path}: imports {t!r} outside the kvwear namespace")
            r = _resolve(t) if t.startswith("kvwear") else None
            if r and r != module:
                out.add(r)
    return out


GRAPH = {m: _edges(m, p) for m, p in MODULES.items()}


def layer(module: str) -> int:
    """The layer of the longest prefix that names `module` (kvwear's primitives by their own names)."""
    best, best_len = -1, -1
    for i, prefixes in enumerate(LAYERS):
        for p in prefixes:
            if (module == p or module.startswith(p + ".")) and len(p) > best_len:
                best, best_len = i, len(p)
    if best < 0 or (best == 0 and module not in LAYERS[0]):
        raise AssertionError(f"{module} is in no layer")
    return best


def _circles() -> list[list[str]]:
    """Strongly connected components of more than one module (Tarjan)."""
    index: dict[str, int] = {}
    low: dict[str, int] = {}
    stack: list[str] = []
    on: set[str] = set()
    out: list[list[str]] = []

    def visit(v: str) -> None:
        index[v] = low[v] = len(index)
        stack.append(v)
        on.add(v)
        for w in sorted(GRAPH[v]):
            if w not in index:
                visit(w)
                low[v] = min(low[v], low[w])
            elif w in on:
                low[v] = min(low[v], index[w])
        if low[v] == index[v]:
            comp = []
            while True:
                w = stack.pop()
                on.discard(w)
                comp.append(w)
                if w == v:
                    break
            if len(comp) > 1:
                out.append(sorted(comp))

    for v in sorted(GRAPH):
        if v not in index:
            visit(v)
    return out


def test_the_graph_is_read() -> None:
    assert len(MODULES) > 100
    assert "kvwear.harness.devices.sim" in GRAPH["kvwear.harness.pipeline.run"] or any(
        "kvwear.harness.devices" in e for e in GRAPH["kvwear.harness.pipeline.run"])
    assert "kvwear.emulator.ftl" in GRAPH["kvwear.harness.devices.sim"]


def test_no_import_circle() -> None:
    assert _circles() == []


def test_no_import_runs_back_up() -> None:
    up = sorted(f"{m} -> {t}" for m, ts in GRAPH.items() for t in ts if layer(t) > layer(m))
    assert up == []


def test_every_module_has_a_layer() -> None:
    for m in MODULES:
        layer(m)


@pytest.mark.parametrize("folder", STAGE_FOLDERS)
def test_checkout_links_each_stage_folder(folder: str) -> None:
    """kvwear/<stage> links the top-level folder, so a checkout and the wheel import the same names."""
    link = REPO / "kvwear" / folder
    assert link.is_symlink() and link.resolve() == (REPO / folder).resolve()


def _code_strings(path: Path) -> list[tuple[int, str]]:
    """The string constants of a module that are not docstrings (prose may name a device)."""
    tree = ast.parse(path.read_text(), str(path))
    docs = {id(n.body[0].value) for n in ast.walk(tree)
            if isinstance(n, ast.Module | ast.ClassDef | ast.FunctionDef | ast.AsyncFunctionDef)
            and n.body and isinstance(n.body[0], ast.Expr) and isinstance(n.body[0].value, ast.Constant)}
    return [(n.lineno, n.value) for n in ast.walk(tree)
            if isinstance(n, ast.Constant) and isinstance(n.value, str) and id(n) not in docs]


def test_the_estimator_and_the_reports_know_no_backend_by_name() -> None:
    """They read what a device measurement says of each count (its source, its unit), never which
    backend made it: no string of theirs is a device backend's name."""
    from kvwear.harness.devices.base import DEVICES

    names = set(DEVICES.names())
    assert {"sim", "file", "block", "qemu", "femu"} <= names
    found = [f"{p.relative_to(REPO)}:{line}: {s!r}" for m, p in MODULES.items()
             if m.startswith(("kvwear.harness.estimate", "kvwear.reports"))
             for line, s in _code_strings(p) if s in names]
    assert found == []
