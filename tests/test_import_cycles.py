"""No import cycles in the tree: a module that needs another's piece takes it from where it
lives, and nothing it imports (at load time or inside a function) comes back to it.

Read from the source with ast, not by importing: an import inside a function counts (it closes a
cycle as soon as the function runs), one under ``if TYPE_CHECKING:`` does not (it never runs).
``from package import name`` is an edge to ``package.name`` where that is a module, else to the
package; a submodule's implicit load of its own package is not an edge."""

from __future__ import annotations

import ast
from pathlib import Path

from tests.conftest import ROOT

PACKAGES = ("analysis", "benchmarks", "cli", "dashboard", "runner", "store", "tests")


def module_files(root: Path) -> dict[str, Path]:
    modules: dict[str, Path] = {}
    for package in PACKAGES:
        for path in sorted((root / package).rglob("*.py")):
            parts = path.relative_to(root).with_suffix("").parts
            name = ".".join(parts[:-1] if parts[-1] == "__init__" else parts)
            modules[name] = path
    return modules


def runtime_imports(tree: ast.AST) -> list[tuple[str, list[str]]]:
    """(module, names) of every import that can run, skipping ``if TYPE_CHECKING:`` bodies."""
    found: list[tuple[str, list[str]]] = []

    def visit(node: ast.AST) -> None:
        if isinstance(node, ast.If) and "TYPE_CHECKING" in ast.unparse(node.test):
            for branch in node.orelse:
                visit(branch)
            return
        if isinstance(node, ast.Import):
            found.extend((alias.name, []) for alias in node.names)
        elif isinstance(node, ast.ImportFrom) and node.level == 0 and node.module:
            found.append((node.module, [alias.name for alias in node.names]))
        for child in ast.iter_child_nodes(node):
            visit(child)

    visit(tree)
    return found


def import_graph(root: Path) -> dict[str, set[str]]:
    modules = module_files(root)
    graph: dict[str, set[str]] = {name: set() for name in modules}
    for name, path in modules.items():
        for module, names in runtime_imports(ast.parse(path.read_text(), filename=str(path))):
            targets = {f"{module}.{each}" for each in names if f"{module}.{each}" in modules}
            if len(targets) < len(names) or not names:
                targets.add(module)  # a name defined in the module (or package) itself
            graph[name] |= {target for target in targets if target in modules and target != name}
    return graph


def cycles(graph: dict[str, set[str]]) -> list[list[str]]:
    """The strongly connected components of more than one module (Tarjan's algorithm, iterative)."""
    index: dict[str, int] = {}
    lowest: dict[str, int] = {}
    stack: list[str] = []
    on_stack: set[str] = set()
    components: list[list[str]] = []
    for start in sorted(graph):
        if start in index:
            continue
        work = [(start, iter(sorted(graph[start])))]
        index[start] = lowest[start] = len(index)
        stack.append(start)
        on_stack.add(start)
        while work:
            node, successors = work[-1]
            successor = next(successors, None)
            if successor is not None:
                if successor not in index:
                    index[successor] = lowest[successor] = len(index)
                    stack.append(successor)
                    on_stack.add(successor)
                    work.append((successor, iter(sorted(graph[successor]))))
                elif successor in on_stack:
                    lowest[node] = min(lowest[node], index[successor])
                continue
            work.pop()
            if work:
                lowest[work[-1][0]] = min(lowest[work[-1][0]], lowest[node])
            if lowest[node] == index[node]:
                component = []
                while True:
                    member = stack.pop()
                    on_stack.discard(member)
                    component.append(member)
                    if member == node:
                        break
                if len(component) > 1:
                    components.append(sorted(component))
    return components


def test_the_scan_finds_a_cycle_through_a_function_level_import(tmp_path: Path) -> None:
    package = tmp_path / "runner"
    package.mkdir()
    (package / "__init__.py").write_text("")
    (package / "first.py").write_text("from runner.second import helper\n")
    (package / "second.py").write_text(
        "from typing import TYPE_CHECKING\nif TYPE_CHECKING:\n    from runner import first\n"
        "def helper():\n    from runner.third import thing\n"
    )
    (package / "third.py").write_text("from runner import first\n")
    assert cycles(import_graph(tmp_path)) == [["runner.first", "runner.second", "runner.third"]]
    (package / "third.py").write_text("")
    assert cycles(import_graph(tmp_path)) == [], "a TYPE_CHECKING import closes no cycle"


def test_the_tree_has_no_import_cycle() -> None:
    found = cycles(import_graph(ROOT))
    assert found == [], "\n".join(" <-> ".join(component) for component in found)
