"""The layout's two rules, read from the source: no import cycle between the project's modules, and no module
imports a layer above its own (docs/ARCHITECTURE.md draws the layers). Every import counts, at module level or
inside a function, except those under `if TYPE_CHECKING:` (they never run)."""

import ast
from pathlib import Path

import networkx as nx
import pytest

ROOT = Path(__file__).resolve().parents[1]
PACKAGES = ("explainers", "labelattn")
ROOT_MODULES = ("configuration_labelattn", "modeling_labelattn")

# From the bottom up: a module may import its own layer and those below, never one above.
LAYERS = (
    ("configuration_labelattn",),
    ("modeling_labelattn",),
    ("explainers",),
    ("labelattn",),  # the package root: the default model folder and the shipped encoder's path
    ("labelattn.data", "labelattn.arguments"),
    ("labelattn.training", "labelattn.corpus"),
    ("labelattn.explain", "labelattn.predict", "labelattn.evaluate_explanations", "labelattn.space"),
    ("labelattn.cli", "labelattn.__main__"),
)
# Rooms of one layer that must not lean on each other.
SIBLINGS_APART = (("labelattn.training", "labelattn.corpus"),)


def module_name(path: Path) -> str:
    parts = list(path.relative_to(ROOT).with_suffix("").parts)
    if parts[-1] == "__init__":
        parts.pop()
    return ".".join(parts)


def project_files() -> list[Path]:
    files = [ROOT / f"{name}.py" for name in ROOT_MODULES]
    for package in PACKAGES:
        files += sorted((ROOT / package).rglob("*.py"))
    return files


def is_type_checking(node: ast.If) -> bool:
    test = node.test
    return (isinstance(test, ast.Name) and test.id == "TYPE_CHECKING") or (
        isinstance(test, ast.Attribute) and test.attr == "TYPE_CHECKING"
    )


def imported_modules(path: Path, known: set[str]) -> set[str]:
    """The project modules `path` imports (the deepest known module each import names)."""
    name = module_name(path)
    package = name if path.name == "__init__.py" else name.rpartition(".")[0]
    found: set[str] = set()

    def resolve(target: str) -> str | None:
        while target and target not in known:
            target = target.rpartition(".")[0]
        return target or None

    def visit(node: ast.AST) -> None:
        if isinstance(node, ast.If) and is_type_checking(node):
            for child in node.orelse:
                visit(child)
            return
        if isinstance(node, ast.Import):
            for alias in node.names:
                found.add(resolve(alias.name))
        elif isinstance(node, ast.ImportFrom):
            if node.level:
                base = package.split(".")[: len(package.split(".")) - node.level + 1] if package else []
                stem = ".".join([*base, *([node.module] if node.module else [])])
            else:
                stem = node.module or ""
            for alias in node.names:
                found.add(resolve(f"{stem}.{alias.name}") or resolve(stem))
        for child in ast.iter_child_nodes(node):
            visit(child)

    visit(ast.parse(path.read_text(encoding="utf-8")))
    found.discard(None)
    found.discard(name)
    return found


@pytest.fixture(scope="module")
def graph() -> nx.DiGraph:
    files = project_files()
    known = {module_name(path) for path in files}
    graph = nx.DiGraph()
    for path in files:
        graph.add_node(module_name(path))
        for target in imported_modules(path, known):
            graph.add_edge(module_name(path), target)
    return graph


def layer_of(module: str) -> int:
    """The index in `LAYERS` of the longest prefix that names `module`'s room."""
    best, best_length = None, -1
    for index, rooms in enumerate(LAYERS):
        for room in rooms:
            if (module == room or module.startswith(room + ".")) and len(room) > best_length:
                best, best_length = index, len(room)
    assert best is not None, f"{module} is in no layer: add its room to LAYERS and to docs/ARCHITECTURE.md"
    return best


def test_the_graph_sees_the_imports(graph):
    """A check that cannot fail is no check: the graph holds the edges every reader knows are there."""
    assert graph.has_edge("modeling_labelattn", "configuration_labelattn")
    assert graph.has_edge("explainers.base", "explainers.registry")
    assert graph.has_edge("labelattn.training.run", "labelattn.training.checkpoints")
    assert graph.number_of_edges() > 100


def test_no_import_cycle(graph):
    cycles = list(nx.simple_cycles(graph))
    assert not cycles, "import cycles: " + "; ".join(" -> ".join([*cycle, cycle[0]]) for cycle in cycles[:5])


def test_no_module_imports_a_layer_above_its_own(graph):
    upward = [(a, b) for a, b in graph.edges if layer_of(b) > layer_of(a)]
    assert not upward, f"imports against the layers: {upward}"


def test_rooms_of_one_layer_stay_apart(graph):
    for first, second in SIBLINGS_APART:
        crossing = [
            (a, b)
            for a, b in graph.edges
            if {a.startswith(first), b.startswith(first)} == {True, False}
            and (a.startswith(second) or b.startswith(second))
        ]
        assert not crossing, f"{first} and {second} import each other: {crossing}"


def test_the_remote_code_imports_only_torch_transformers_and_itself():
    for name in ROOT_MODULES:
        tree = ast.parse((ROOT / f"{name}.py").read_text(encoding="utf-8"))
        for node in ast.walk(tree):
            if isinstance(node, ast.Import):
                roots = {alias.name.split(".")[0] for alias in node.names}
            elif isinstance(node, ast.ImportFrom) and not node.level:
                roots = {(node.module or "").split(".")[0]}
            else:
                continue
            assert roots <= {"torch", "transformers", "math", "dataclasses", "typing", "configuration_labelattn"}, (
                f"{name} imports {roots}: remote code imports nothing but torch, transformers and its own files"
            )
