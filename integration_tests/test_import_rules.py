"""The dependency rules of docs/architecture.md, enforced by reading the source.

- A stage (frontend, aot, inductor) never imports another stage; the runtime imports none.
- No package touches torch.compile's machinery: ``torch._dynamo``, ``torch._inductor``,
  ``torch._functorch``, ``torch.export``, ``torch.compile``, ``make_fx``.
- ``ember`` is a PEP 420 namespace: no ``ember/__init__.py`` in any package.
- Each stage's pyproject depends on ``ember-runtime`` and on no other stage.
- No import cycles inside a package: module-level and function-level imports count,
  ``if TYPE_CHECKING:`` imports do not; a failure prints the cycle with file and line.

Imports are found in the AST (``import``, ``from ... import``, relative imports resolved,
``importlib.import_module("...")`` / ``__import__("...")`` with a constant name), and so
are attribute chains such as ``torch._dynamo.reset`` reached through ``import torch``.
"""

from __future__ import annotations

import ast
import re
import tomllib
from collections import deque
from collections.abc import Mapping
from pathlib import Path

import pytest
from source_scan import (
    ALL_PACKAGES,
    PACKAGES,
    REPO,
    STAGES,
    Violation,
    dotted,
    imported_modules,
    imports_of,
    module_name,
    relative,
    source_files,
    within,
)

FORBIDDEN_TORCH = ("torch._dynamo", "torch._inductor", "torch._functorch", "torch.export")
FORBIDDEN_CALLS = ("torch.compile", "make_fx")


def check_source(source: str, module_name: str, owner: str, file: str) -> list[Violation]:
    """Every rule broken by one file of package ``owner`` (``runtime``, ``aot``, ...)."""
    tree = ast.parse(source, filename=file)
    violations: list[Violation] = []
    forbidden_stages = [s for s in STAGES if s != owner]
    for line, module in imported_modules(tree, module_name):
        for stage in forbidden_stages:
            if within(module, f"ember.{stage}"):
                who = "the runtime" if owner == "runtime" else f"stage {owner!r}"
                violations.append(Violation(file, line, f"{who} imports {module} "
                                                        f"(stage {stage!r})"))
        for prefix in FORBIDDEN_TORCH:
            if within(module, prefix):
                violations.append(Violation(file, line, f"imports {module}"))
    for node in ast.walk(tree):
        if isinstance(node, ast.Attribute):
            chain = dotted(node) or ""
            for prefix in FORBIDDEN_TORCH:
                # Report the shortest chain only (the inner Attribute of a longer one).
                if chain == prefix:
                    violations.append(Violation(file, node.lineno, f"uses {chain}"))
        if isinstance(node, ast.Call):
            callee = dotted(node.func) or ""
            if callee in FORBIDDEN_CALLS or callee.endswith(".make_fx"):
                violations.append(Violation(file, node.lineno, f"calls {callee}"))
    return violations


def _source_files() -> list[tuple[str, Path]]:
    return [(owner, path) for owner in ALL_PACKAGES for path in source_files(owner)]


def test_sources_were_found() -> None:
    owners = {owner for owner, _ in _source_files()}
    assert owners == set(ALL_PACKAGES)


def test_no_forbidden_imports_or_calls() -> None:
    violations: list[Violation] = []
    for owner, path in _source_files():
        violations += check_source(path.read_text(), module_name(path, owner), owner,
                                   relative(path))
    assert not violations, "import rules broken:\n" + "\n".join(map(str, violations))


def test_ember_is_a_namespace_package() -> None:
    offenders = [str(p.relative_to(REPO)) for p in PACKAGES.glob("*/src/ember/__init__.py")]
    assert not offenders, f"PEP 420: remove {offenders}"


_NAME = re.compile(r"^\s*([A-Za-z0-9][A-Za-z0-9._-]*)")


def _dependencies(owner: str) -> set[str]:
    data = tomllib.loads((PACKAGES / owner / "pyproject.toml").read_text())
    names = set()
    for requirement in data["project"].get("dependencies", []):
        match = _NAME.match(requirement)
        assert match, f"{owner}: unreadable requirement {requirement!r}"
        names.add(re.sub(r"[-_.]+", "-", match.group(1)).lower())
    return names


@pytest.mark.parametrize("owner", ALL_PACKAGES)
def test_pyproject_dependencies(owner: str) -> None:
    deps = _dependencies(owner)
    other_stages = {f"ember-{s}" for s in STAGES if s != owner}
    assert not deps & other_stages, f"{owner} depends on {sorted(deps & other_stages)}"
    if owner == "runtime":
        assert "ember-runtime" not in deps and "torch" in deps
    else:
        assert "ember-runtime" in deps, f"{owner} must depend on ember-runtime"


# -- no import cycles inside a package ---------------------------------------------------

ImportGraph = dict[str, dict[str, int]]
"""module -> {module of the same package it imports: line of the first such import}"""


def _graph_node(module: str) -> str:
    return module.removesuffix(".__init__")


def import_graph(sources: Mapping[str, str]) -> ImportGraph:
    """The imports between the modules of one package. ``sources`` maps a module name (a
    package's ``__init__`` as ``pkg.__init__``) to its source text. Module-level and
    function-level imports count (a function-level import only postpones the cycle);
    imports under ``if TYPE_CHECKING:`` do not. ``from a import b`` is an import of the
    module ``a.b`` where there is one, else of ``a``; importing ``a.b`` is not counted as
    importing ``a`` (every module would then import its package's ``__init__``)."""
    known = {_graph_node(name) for name in sources}
    graph: ImportGraph = {}
    for name, text in sources.items():
        node = _graph_node(name)
        edges: dict[str, int] = {}
        for imp in imports_of(ast.parse(text), name, skip_type_checking=True):
            target = next((c for c in imp.candidates if c in known), None)
            if target is not None and target != node:
                edges.setdefault(target, imp.line)
        graph[node] = edges
    return graph


def _strongly_connected(graph: ImportGraph) -> list[set[str]]:
    """Tarjan's components of more than one module."""
    index: dict[str, int] = {}
    low: dict[str, int] = {}
    stack: list[str] = []
    components: list[set[str]] = []

    def visit(node: str) -> None:
        index[node] = low[node] = len(index)
        stack.append(node)
        for target in graph[node]:
            if target not in index:
                visit(target)
                low[node] = min(low[node], low[target])
            elif target in stack:
                low[node] = min(low[node], index[target])
        if low[node] == index[node]:
            component = set()
            while True:
                member = stack.pop()
                component.add(member)
                if member == node:
                    break
            if len(component) > 1:
                components.append(component)

    for node in sorted(graph):
        if node not in index:
            visit(node)
    return components


def _shortest_cycle(graph: ImportGraph, start: str, within_set: set[str]) -> list[str]:
    previous: dict[str, str] = {}
    queue = deque([start])
    while queue:
        node = queue.popleft()
        for target in sorted(graph[node]):
            if target == start:
                path = [node]
                while path[-1] != start:
                    path.append(previous[path[-1]])
                return list(reversed(path))
            if target in within_set and target not in previous:
                previous[target] = node
                queue.append(target)
    raise AssertionError(f"{start} is in a cycle but none returns to it")


def find_cycles(graph: ImportGraph) -> list[tuple[list[str], set[str]]]:
    """The import cycles of ``graph``, one for each set of modules that import each other
    (a strongly connected component): the shortest cycle in it, starting at its smallest
    module name, and the whole set."""
    found: list[tuple[list[str], set[str]]] = []
    for component in _strongly_connected(graph):
        cycles = [_shortest_cycle(graph, start, component) for start in sorted(component)]
        shortest = min(cycles, key=len)
        first = shortest.index(min(shortest))
        found.append((shortest[first:] + shortest[:first], component))
    return found


def describe_cycle(cycle: list[str], component: set[str], graph: ImportGraph,
                   files: Mapping[str, str]) -> str:
    """``a -> b (a.py:3) -> a (b.py:7)``: each arrow names the importing file and line;
    then the other modules tied up in the same knot, if any."""
    steps = [cycle[0]]
    for source, target in zip(cycle, [*cycle[1:], cycle[0]]):
        steps.append(f"{target} ({files.get(source, source)}:{graph[source][target]})")
    text = " -> ".join(steps)
    others = sorted(component - set(cycle))
    if others:
        text += f"\n    and {len(others)} more modules in cycles with these: {', '.join(others)}"
    return text


def _package_sources(owner: str) -> tuple[dict[str, str], dict[str, str]]:
    sources: dict[str, str] = {}
    files: dict[str, str] = {}
    for path in source_files(owner):
        name = module_name(path, owner)
        sources[name] = path.read_text()
        files[_graph_node(name)] = relative(path)
    return sources, files


@pytest.mark.parametrize("owner", ALL_PACKAGES)
def test_no_import_cycles(owner: str) -> None:
    sources, files = _package_sources(owner)
    graph = import_graph(sources)
    cycles = [describe_cycle(cycle, component, graph, files)
              for cycle, component in find_cycles(graph)]
    assert not cycles, f"import cycles in ember-{owner}:\n" + "\n".join(cycles)


# -- the checker itself catches what it should ----------------------------------------


@pytest.mark.parametrize(("source", "owner", "expected"), [
    ("import ember.aot.passes", "inductor", "stage 'inductor' imports ember.aot.passes"),
    ("from ember.frontend import compile", "aot", "imports ember.frontend"),
    ("from ember import inductor", "runtime", "the runtime imports ember.inductor"),
    ("from ..frontend import x", "aot", "imports ember.frontend"),
    ("import importlib\nimportlib.import_module('ember.aot')", "runtime", "imports ember.aot"),
    ("import torch._dynamo", "aot", "imports torch._dynamo"),
    ("from torch import _inductor", "inductor", "imports torch._inductor"),
    ("from torch._functorch.aot_autograd import aot_function", "aot",
     "imports torch._functorch.aot_autograd"),
    ("from torch.export import export", "frontend", "imports torch.export"),
    ("import torch\ntorch._dynamo.reset()", "frontend", "uses torch._dynamo"),
    ("import torch\nf = torch.compile(g)", "runtime", "calls torch.compile"),
    ("from torch.fx.experimental.proxy_tensor import make_fx\nmake_fx(f)", "aot",
     "calls make_fx"),
])
def test_checker_flags(source: str, owner: str, expected: str) -> None:
    violations = check_source(source, f"ember.{owner}.mod", owner, "x.py")
    assert any(expected in v.message for v in violations), violations


@pytest.mark.parametrize(("source", "owner"), [
    ("from ember.runtime.ir import Program", "aot"),
    ("from . import passes\nfrom .codegen import cpp", "inductor"),
    ("import torch\nx = torch.ops.aten.add.Tensor", "runtime"),
    ("from ember.aot.passes import dce", "aot"),
    ("import torch\ntorch.compiler.is_compiling()", "frontend"),
])
def test_checker_allows(source: str, owner: str) -> None:
    assert check_source(source, f"ember.{owner}.mod", owner, "x.py") == []


_CYCLES = [
    # module level, both ways
    ({"p.a": "from p import b", "p.b": "import p.a"}, ["p.a", "p.b"]),
    # a function-level import only postpones the cycle
    ({"p.a": "def f():\n    from p.b import x", "p.b": "from p.a import y"}, ["p.a", "p.b"]),
    # relative imports, from a module and from a package's __init__
    ({"p.a": "from . import b", "p.b": "from .a import x"}, ["p.a", "p.b"]),
    ({"p.__init__": "from .a import x", "p.a": "from p import y"}, ["p", "p.a"]),
    # importlib with a constant name
    ({"p.a": "import importlib\nimportlib.import_module('p.b')", "p.b": "import p.a"},
     ["p.a", "p.b"]),
    # three modules; the else branch of a TYPE_CHECKING test runs
    ({"p.a": "import p.b", "p.b": "import p.c",
      "p.c": "if TYPE_CHECKING:\n    pass\nelse:\n    import p.a"}, ["p.a", "p.b", "p.c"]),
]


@pytest.mark.parametrize(("sources", "cycle"), _CYCLES)
def test_cycle_checker_flags(sources: dict[str, str], cycle: list[str]) -> None:
    graph = import_graph(sources)
    assert [c for c, _ in find_cycles(graph)] == [cycle]
    files = {node: f"{node}.py" for node in graph}
    text = describe_cycle(cycle, set(cycle), graph, files)
    first, last = (re.escape(name) for name in (cycle[0], cycle[-1]))
    assert re.match(rf"{first} -> {re.escape(cycle[1])} \({first}\.py:\d+\) -> ", text)
    assert re.search(rf" -> {first} \({last}\.py:\d+\)$", text)


def test_cycle_checker_names_every_module_of_a_knot() -> None:
    sources = {"p.a": "import p.b\nimport p.c", "p.b": "import p.a", "p.c": "import p.d",
               "p.d": "import p.a"}
    graph = import_graph(sources)
    [(cycle, component)] = find_cycles(graph)
    assert cycle == ["p.a", "p.b"] and component == {"p.a", "p.b", "p.c", "p.d"}
    text = describe_cycle(cycle, component, graph, {})
    assert text == "p.a -> p.b (p.a:1) -> p.a (p.b:1)\n    and 2 more modules in cycles " \
                   "with these: p.c, p.d"


@pytest.mark.parametrize("sources", [
    # imports for type checking only
    {"p.a": "from typing import TYPE_CHECKING\nif TYPE_CHECKING:\n    from p.b import B",
     "p.b": "from p.a import A"},
    {"p.a": "import typing\nif typing.TYPE_CHECKING:\n    import p.b", "p.b": "import p.a"},
    # a chain; a submodule imported through its package; modules of other packages
    {"p.a": "import p.b", "p.b": "from p import c", "p.c": "import torch\nimport q.a",
     "p.__init__": ""},
    # a module importing itself is no cycle
    {"p.a": "from p.a import x"},
])
def test_cycle_checker_allows(sources: dict[str, str]) -> None:
    assert find_cycles(import_graph(sources)) == []
