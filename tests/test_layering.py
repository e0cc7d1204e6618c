"""The import structure matches docs/architecture.md: no module imports a layer above its own,
and no modules import each other in a cycle (imports inside functions included)."""

from __future__ import annotations

import ast
import re
import sys
from pathlib import Path

from conftest import ROOT

PACKAGE = ROOT / "pure_dp_mf"


def declared_layers() -> list[list[str]]:
    """The layers of docs/architecture.md's "Layers" section, bottom first: one numbered line
    each, naming its packages or top-level modules in backticks."""
    text = (ROOT / "docs" / "architecture.md").read_text(encoding="utf-8")
    section = text.split("\n## Layers\n", 1)[1].split("\n## ", 1)[0]
    layers = [re.findall(r"`([a-z_]+)/?`", line) for line in section.splitlines() if re.match(r"\d+\. ", line)]
    assert layers and all(layers), "docs/architecture.md's Layers section lists no layers"
    return layers


def module_name(path: Path) -> str:
    parts = path.relative_to(ROOT).with_suffix("").parts
    return ".".join(parts[:-1] if parts[-1] == "__init__" else parts)


def imports() -> dict[str, set[str]]:
    """Every module of the package and the package modules it imports, at any depth of its code
    (a name imported from a package counts as its submodule when one exists)."""
    modules = {module_name(path): path for path in PACKAGE.rglob("*.py")}
    graph: dict[str, set[str]] = {}
    for name, path in modules.items():
        targets: set[str] = set()
        for node in ast.walk(ast.parse(path.read_text(encoding="utf-8"))):
            if isinstance(node, ast.ImportFrom) and node.module and node.module.startswith("pure_dp_mf"):
                for alias in node.names:
                    child = f"{node.module}.{alias.name}"
                    targets.add(child if child in modules else node.module)
            elif isinstance(node, ast.Import):
                targets.update(alias.name for alias in node.names if alias.name.startswith("pure_dp_mf"))
        graph[name] = {target for target in targets if target in modules and target != name}
    return graph


def layer_of(module: str, layers: list[list[str]]) -> int | None:
    parts = module.split(".")
    if len(parts) < 2:
        return None  # the package itself: its lazy attributes reach anything
    for index, names in enumerate(layers):
        if parts[1] in names:
            return index
    raise AssertionError(f"{module} is in no layer of docs/architecture.md")


def test_no_module_imports_a_higher_layer():
    layers = declared_layers()
    upward = []
    for module, targets in sorted(imports().items()):
        mine = layer_of(module, layers)
        for target in sorted(targets):
            theirs = layer_of(target, layers)
            if mine is not None and theirs is not None and theirs > mine:
                upward.append(f"{module} -> {target}")
    assert upward == []


def test_no_import_cycles():
    graph = imports()
    graph = {module: {target for target in targets if len(target.split(".")) > 1} for module, targets in graph.items()}
    index: dict[str, int] = {}
    low: dict[str, int] = {}
    stack: list[str] = []
    on_stack: set[str] = set()
    cycles: list[list[str]] = []
    counter = [0]

    def connect(node: str) -> None:  # Tarjan's strongly connected components
        index[node] = low[node] = counter[0]
        counter[0] += 1
        stack.append(node)
        on_stack.add(node)
        for target in graph.get(node, ()):
            if target not in index:
                connect(target)
                low[node] = min(low[node], low[target])
            elif target in on_stack:
                low[node] = min(low[node], index[target])
        if low[node] == index[node]:
            component = []
            while True:
                member = stack.pop()
                on_stack.discard(member)
                component.append(member)
                if member == node:
                    break
            if len(component) > 1:
                cycles.append(sorted(component))

    for node in sorted(graph):
        if node not in index:
            connect(node)
    assert cycles == []


def test_the_checker_sees_an_upward_import_and_a_cycle(tmp_path, monkeypatch):
    """The two tests above can fail: a lower module importing a higher one, and two modules
    importing each other, are both reported."""
    layers = [["errors"], ["engines"]]
    assert layer_of("pure_dp_mf.errors", layers) < layer_of("pure_dp_mf.engines.counter", layers)
    fake = tmp_path / "pure_dp_mf"
    (fake / "engines").mkdir(parents=True)
    (fake / "__init__.py").write_text("")
    (fake / "errors.py").write_text("def f():\n    from pure_dp_mf.engines import counter\n")
    (fake / "engines" / "__init__.py").write_text("")
    (fake / "engines" / "counter.py").write_text("from pure_dp_mf import errors\n")
    module = sys.modules[__name__]
    monkeypatch.setattr(module, "ROOT", tmp_path)
    monkeypatch.setattr(module, "PACKAGE", fake)
    graph = imports()
    assert graph["pure_dp_mf.errors"] == {"pure_dp_mf.engines.counter"}
    assert graph["pure_dp_mf.engines.counter"] == {"pure_dp_mf.errors"}
