"""The import direction of docs/architecture.md: fedlight's packages import one another one way
(each only packages of the layers below it, no cycle, between packages or between modules),
fedlight.core imports nothing else of fedlight, and no package hides an import behind a module
__getattr__."""

from __future__ import annotations

import ast
from pathlib import Path

import pytest

PACKAGE = Path(__file__).resolve().parents[1] / "fedlight"
ARCHITECTURE = PACKAGE.parent / "docs" / "architecture.md"
#: fedlight's packages (and top-level modules) from the bottom up: a package imports only
#: packages of the layers below its own. The server rules sit below the client methods
#: (SCAFFOLD's rule derives from FedAvgM), the orchestrator above them.
LAYER_NAMES = (
    ("core", "version"),
    ("compat",),
    ("plotting",),
    ("data", "models"),
    ("server",),
    ("clients",),
    ("federation",),
    ("privacy",),
    ("parsing",),
    ("config",),
    ("flower",),
    ("analysis",),
    ("sweep",),
    ("cli",),
    ("console",),
    ("__main__",),
)
LAYERS = (*(frozenset(f"fedlight.{name}" for name in layer) for layer in LAYER_NAMES),
          frozenset({"fedlight"}))  # the package's own __init__ on top


def module_name(path: Path) -> str:
    parts = path.relative_to(PACKAGE.parent).with_suffix("").parts
    return ".".join(parts[:-1] if parts[-1] == "__init__" else parts)


def package_of(module: str) -> str:
    """The graph node of a module: fedlight.<package> (or a top-level module itself)."""
    return ".".join(module.split(".")[:2])


def imports(path: Path, modules: set[str], top_level_only: bool = False) -> set[str]:
    """Every fedlight module ``path`` imports, at its top or (unless ``top_level_only``)
    inside a function (``from a.b import c`` imports the module a.b.c where there is one, else
    a.b)."""
    found: set[str] = set()
    tree = ast.parse(path.read_text())
    for node in tree.body if top_level_only else ast.walk(tree):
        if isinstance(node, ast.Import):
            found |= {a.name for a in node.names if a.name.startswith("fedlight")}
        elif isinstance(node, ast.ImportFrom) and node.module and node.level == 0:
            if node.module.startswith("fedlight"):
                for alias in node.names:
                    submodule = f"{node.module}.{alias.name}"
                    found.add(submodule if submodule in modules else node.module)
    return found


def module_graph(top_level_only: bool = False) -> dict[str, set[str]]:
    """Which fedlight modules each module imports; a module's own packages are left out (they
    are imported before it in any case)."""
    paths = {module_name(p): p for p in PACKAGE.rglob("*.py")}
    return {name: {m for m in imports(path, set(paths), top_level_only)
                   if m in paths and m != name and not name.startswith(m + ".")}
            for name, path in paths.items()}


def package_graph() -> dict[str, set[str]]:
    graph: dict[str, set[str]] = {}
    for module, targets in module_graph().items():
        edges = graph.setdefault(package_of(module), set())
        edges |= {package_of(t) for t in targets} - {package_of(module)}
    return graph


def find_cycle(graph: dict[str, set[str]]) -> list[str] | None:
    """A cycle of ``graph`` (its nodes in order, the first repeated at the end), or None."""
    state: dict[str, str] = {}
    stack: list[str] = []

    def visit(node: str) -> list[str] | None:
        state[node] = "open"
        stack.append(node)
        for target in sorted(graph.get(node, ())):
            if state.get(target) == "open":
                return [*stack[stack.index(target):], target]
            if target not in state and (cycle := visit(target)):
                return cycle
        state[node] = "done"
        stack.pop()
        return None

    for node in sorted(graph):
        if node not in state and (cycle := visit(node)):
            return cycle
    return None


def layer_of(package: str) -> int:
    return next(i for i, layer in enumerate(LAYERS) if package in layer)


def test_every_package_has_a_layer():
    assert set(package_graph()) - set().union(*LAYERS) == set()


def upward_imports(graph: dict[str, set[str]]) -> set[tuple[str, str]]:
    """Every (package, imported package) of ``graph`` whose import runs to the package's own
    layer or a layer above it."""
    return {(package, target) for package, targets in graph.items() for target in targets
            if layer_of(target) >= layer_of(package)}


def test_no_import_runs_back_up():
    assert upward_imports(package_graph()) == set()


def test_the_layer_check_finds_an_import_that_runs_back_up():
    graph = {"fedlight.clients": {"fedlight.server", "fedlight.federation"},
             "fedlight.data": {"fedlight.models"}, "fedlight.server": {"fedlight.core"}}
    assert upward_imports(graph) == {("fedlight.clients", "fedlight.federation"),
                                     ("fedlight.data", "fedlight.models")}


def test_packages_import_each_other_one_way():
    assert find_cycle(package_graph()) is None


def test_no_module_imports_itself_through_others_when_imported():
    assert find_cycle(module_graph(top_level_only=True)) is None


def test_core_imports_nothing_else_of_fedlight():
    graph = package_graph()
    assert graph["fedlight.core"] == set()


def test_the_cycle_finder_finds_a_cycle():
    assert find_cycle({"a": {"b"}, "b": {"c"}, "c": {"a"}}) == ["a", "b", "c", "a"]
    assert find_cycle({"a": {"b"}, "b": set()}) is None


@pytest.mark.parametrize("path", sorted(PACKAGE.rglob("__init__.py")), ids=str)
def test_no_package_imports_lazily_through_getattr(path):
    tree = ast.parse(path.read_text())
    assert not [n for n in tree.body if isinstance(n, ast.FunctionDef) and n.name == "__getattr__"]


def test_the_architecture_page_lists_every_package_and_the_direction_it_checks():
    text = ARCHITECTURE.read_text()
    for package in package_graph():
        assert f"`{package.removeprefix('fedlight.')}" in text, package
