"""The core's import graph: no cycle (function-local imports count, so none can hide one),
layers in order, and no import of a plugin distribution."""

from __future__ import annotations

import ast
from pathlib import Path

REPO = Path(__file__).resolve().parents[1]
CORE = REPO / "core"
PLUGIN_DISTRIBUTIONS = sorted(project.parent for project in (REPO / "plugins").rglob("pyproject.toml")
                              if "tests" not in project.relative_to(REPO).parts)
"""The plugin distribution folders (each with its ``pyproject.toml``), as setup.sh finds them."""


def core_modules(root: Path = CORE) -> dict[str, Path]:
    """``{dotted module name: file}`` of every module under ``root`` (``core/rft``, or a
    plugin distribution's packages; its tests left out)."""
    modules = {}
    for path in sorted(root.rglob("*.py")):
        parts = path.relative_to(root).with_suffix("").parts
        if "tests" in parts or parts[0] in ("setup", "conftest"):
            continue
        modules[".".join(parts).removesuffix(".__init__")] = path
    return modules


def imports_of(name: str, path: Path, modules: dict[str, Path]) -> set[str]:
    """Core modules ``name`` imports anywhere in its body (``TYPE_CHECKING`` blocks left
    out; a parent package is not counted)."""
    tree = ast.parse(path.read_text(encoding="utf-8"))
    typing_only = {id(sub) for node in ast.walk(tree)
                   if isinstance(node, ast.If) and "TYPE_CHECKING" in ast.unparse(node.test)
                   for sub in ast.walk(node)}
    package = name if path.name == "__init__.py" else name.rpartition(".")[0]
    found: set[str] = set()
    for node in ast.walk(tree):
        if id(node) in typing_only:
            continue
        if isinstance(node, ast.Import):
            targets = [alias.name for alias in node.names]
        elif isinstance(node, ast.ImportFrom):
            base = node.module or ""
            if node.level:
                parts = package.split(".")[: len(package.split(".")) - node.level + 1]
                base = ".".join(parts + ([base] if base else []))
            targets = [base] + [f"{base}.{alias.name}" for alias in node.names]
        else:
            continue
        for target in targets:
            while target and target not in modules:
                target = target.rpartition(".")[0]
            if target and target != name and not name.startswith(target + "."):
                found.add(target)
    return found


def import_graph(root: Path = CORE) -> dict[str, set[str]]:
    modules = core_modules(root)
    return {name: imports_of(name, path, modules) for name, path in modules.items()}


def cycles(graph: dict[str, set[str]]) -> list[list[str]]:
    """Strongly connected components with more than one module (Tarjan)."""
    index: dict[str, int] = {}
    low: dict[str, int] = {}
    stack: list[str] = []
    on_stack: set[str] = set()
    found: list[list[str]] = []

    def visit(node: str) -> None:
        index[node] = low[node] = len(index)
        stack.append(node)
        on_stack.add(node)
        for nxt in sorted(graph[node]):
            if nxt not in index:
                visit(nxt)
                low[node] = min(low[node], low[nxt])
            elif nxt in on_stack:
                low[node] = min(low[node], index[nxt])
        if low[node] == index[node]:
            component = []
            while True:
                member = stack.pop()
                on_stack.discard(member)
                component.append(member)
                if member == node:
                    break
            if len(component) > 1:
                found.append(sorted(component))

    for node in sorted(graph):
        if node not in index:
            visit(node)
    return found


def test_the_cycle_finder_finds_a_cycle():
    graph = {"a": {"b"}, "b": {"c"}, "c": {"a"}, "d": {"a"}}
    assert cycles(graph) == [["a", "b", "c"]]


def test_core_has_no_import_cycle():
    assert cycles(import_graph()) == []


def test_plugins_have_no_import_cycle():
    """Each plugin distribution's own modules (``convert_verl``'s trainer choice once
    imported its command line, veRL's worker group the trainer's privates)."""
    assert len(PLUGIN_DISTRIBUTIONS) > 20
    found = {root.relative_to(REPO).as_posix(): cycles(import_graph(root))
             for root in PLUGIN_DISTRIBUTIONS}
    assert {name: c for name, c in found.items() if c} == {}


LOWER_LAYERS: dict[str, tuple[str, ...]] = {
    "rft.config": ("rft.engines", "rft.endpoint", "rft.rollout", "rft.trainer", "rft.modes", "rft.distributed",
                   "rft.buffer", "rft.monitor", "rft.launcher", "rft.cli"),
    "rft.trainer": ("rft.engines", "rft.endpoint", "rft.rollout", "rft.modes", "rft.distributed", "rft.launcher",
                    "rft.cli"),
    "rft.engines": ("rft.endpoint", "rft.rollout", "rft.trainer", "rft.modes",
                    "rft.distributed.both_actors", "rft.distributed.workers",
                    "rft.distributed.engine_pool", "rft.distributed.buffer_actor",
                    "rft.launcher", "rft.cli"),
    "rft.endpoint": ("rft.rollout", "rft.trainer", "rft.modes", "rft.distributed",
                     "rft.launcher", "rft.cli"),
    "rft.rollout": ("rft.trainer", "rft.modes", "rft.distributed.both_actors",
                    "rft.distributed.workers", "rft.distributed.engine_pool",
                    "rft.distributed.buffer_actor", "rft.launcher", "rft.cli"),
    "rft.modes": ("rft.distributed", "rft.launcher", "rft.cli"),
    "rft.contracts": ("rft.config", "rft.trainer", "rft.engines", "rft.endpoint",
                      "rft.rollout", "rft.modes"),
}
"""Packages that must not import the packages listed (the run plan sits below the
runtime; explorer and trainer do not know each other — the weight-broadcast group is a
library both use —; modes sit below the cluster runtime, which implements their
interface, and the launcher)."""


def test_layers_import_downwards_only():
    graph = import_graph()
    wrong = sorted(f"{module} imports {target}"
                   for module, targets in graph.items()
                   for layer, forbidden in LOWER_LAYERS.items()
                   if module == layer or module.startswith(layer + ".")
                   for target in targets
                   if any(target == f or target.startswith(f + ".") for f in forbidden))
    assert wrong == []


def external_imports(path: Path) -> set[str]:
    """Top-level names of what a module imports anywhere in its body (``TYPE_CHECKING``
    blocks included: a type needs the package as much)."""
    tree = ast.parse(path.read_text(encoding="utf-8"))
    found: set[str] = set()
    for node in ast.walk(tree):
        if isinstance(node, ast.Import):
            found.update(alias.name.split(".")[0] for alias in node.names)
        elif isinstance(node, ast.ImportFrom) and not node.level and node.module:
            found.add(node.module.split(".")[0])
    return found


def test_modes_do_not_import_ray():
    """The modes' logic gets its cluster as an injected runtime
    (``rft.modes.runtime.Distributed``); only ``rft.distributed`` imports Ray."""
    modules = core_modules()
    importing = sorted(name for name, path in modules.items()
                       if name.startswith("rft.modes") and "ray" in external_imports(path))
    assert importing == []
    assert "ray" in external_imports(modules["rft.distributed.both_actors"])  # (the scan sees)


def test_core_imports_no_plugin_distribution():
    for path in (CORE / "rft").rglob("*.py"):
        tree = ast.parse(path.read_text(encoding="utf-8"))
        for node in ast.walk(tree):
            names = ([a.name for a in node.names] if isinstance(node, ast.Import)
                     else [node.module or ""] if isinstance(node, ast.ImportFrom) else [])
            assert not any(n.startswith("rft_plugin_") for n in names), path
