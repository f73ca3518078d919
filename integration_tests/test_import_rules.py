"""The dependency rules of docs/architecture.md, enforced by reading the source.

- A stage (frontend, aot, inductor) never imports another stage; the runtime imports none.
- No package touches torch.compile's machinery: ``torch._dynamo``, ``torch._inductor``,
  ``torch._functorch``, ``torch.export``, ``torch.compile``, ``make_fx``.
- ``ember`` is a PEP 420 namespace: no ``ember/__init__.py`` in any package.
- Each stage's pyproject depends on ``ember-runtime`` and on no other stage.

Imports are found in the AST (``import``, ``from ... import``, relative imports resolved,
``importlib.import_module("...")`` / ``__import__("...")`` with a constant name), and so
are attribute chains such as ``torch._dynamo.reset`` reached through ``import torch``.
"""

from __future__ import annotations

import ast
import re
import tomllib
from dataclasses import dataclass
from pathlib import Path

import pytest

REPO = Path(__file__).resolve().parents[1]
PACKAGES = REPO / "packages"
STAGES = ("frontend", "aot", "inductor")
ALL_PACKAGES = ("runtime", *STAGES)
FORBIDDEN_TORCH = ("torch._dynamo", "torch._inductor", "torch._functorch", "torch.export")
FORBIDDEN_CALLS = ("torch.compile", "make_fx")


@dataclass(frozen=True)
class Violation:
    file: str
    line: int
    message: str

    def __str__(self) -> str:
        return f"{self.file}:{self.line}: {self.message}"


def _dotted(node: ast.expr) -> str | None:
    """``torch._dynamo.reset`` -> "torch._dynamo.reset"; None for anything else."""
    parts: list[str] = []
    while isinstance(node, ast.Attribute):
        parts.append(node.attr)
        node = node.value
    if not isinstance(node, ast.Name):
        return None
    parts.append(node.id)
    return ".".join(reversed(parts))


def _within(module: str, prefix: str) -> bool:
    return module == prefix or module.startswith(prefix + ".")


def imported_modules(tree: ast.AST, module_name: str) -> list[tuple[int, str]]:
    """(line, absolute module name) for every import in ``tree``; ``from a import b``
    yields both ``a`` and ``a.b`` (b may be a submodule)."""
    found: list[tuple[int, str]] = []
    package = module_name.rsplit(".", 1)[0]
    for node in ast.walk(tree):
        if isinstance(node, ast.Import):
            found += [(node.lineno, alias.name) for alias in node.names]
        elif isinstance(node, ast.ImportFrom):
            base = node.module or ""
            if node.level:
                anchor = package.split(".")
                anchor = anchor[: len(anchor) - (node.level - 1)]
                base = ".".join([*anchor, base] if base else anchor)
            found.append((node.lineno, base))
            found += [(node.lineno, f"{base}.{alias.name}") for alias in node.names]
        elif isinstance(node, ast.Call):
            callee = _dotted(node.func) or ""
            if callee.split(".")[-1] in ("import_module", "__import__") and node.args:
                first = node.args[0]
                if isinstance(first, ast.Constant) and isinstance(first.value, str):
                    found.append((node.lineno, first.value))
    return found


def check_source(source: str, module_name: str, owner: str, file: str) -> list[Violation]:
    """Every rule broken by one file of package ``owner`` (``runtime``, ``aot``, ...)."""
    tree = ast.parse(source, filename=file)
    violations: list[Violation] = []
    forbidden_stages = [s for s in STAGES if s != owner]
    for line, module in imported_modules(tree, module_name):
        for stage in forbidden_stages:
            if _within(module, f"ember.{stage}"):
                who = "the runtime" if owner == "runtime" else f"stage {owner!r}"
                violations.append(Violation(file, line, f"{who} imports {module} "
                                                        f"(stage {stage!r})"))
        for prefix in FORBIDDEN_TORCH:
            if _within(module, prefix):
                violations.append(Violation(file, line, f"imports {module}"))
    for node in ast.walk(tree):
        if isinstance(node, ast.Attribute):
            chain = _dotted(node) or ""
            for prefix in FORBIDDEN_TORCH:
                # Report the shortest chain only (the inner Attribute of a longer one).
                if chain == prefix:
                    violations.append(Violation(file, node.lineno, f"uses {chain}"))
        if isinstance(node, ast.Call):
            callee = _dotted(node.func) or ""
            if callee in FORBIDDEN_CALLS or callee.endswith(".make_fx"):
                violations.append(Violation(file, node.lineno, f"calls {callee}"))
    return violations


def _source_files() -> list[tuple[str, Path]]:
    files = []
    for owner in ALL_PACKAGES:
        src = PACKAGES / owner / "src"
        files += [(owner, p) for p in sorted(src.rglob("*.py"))]
    return files


def _module_name(path: Path, owner: str) -> str:
    relative = path.relative_to(PACKAGES / owner / "src").with_suffix("")
    parts = list(relative.parts)
    if parts[-1] == "__init__":
        parts = [*parts[:-1], "__init__"]  # so that relative imports anchor on the package
    return ".".join(parts)


def test_sources_were_found() -> None:
    owners = {owner for owner, _ in _source_files()}
    assert owners == set(ALL_PACKAGES)


def test_no_forbidden_imports_or_calls() -> None:
    violations: list[Violation] = []
    for owner, path in _source_files():
        violations += check_source(path.read_text(), _module_name(path, owner), owner,
                                   str(path.relative_to(REPO)))
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
