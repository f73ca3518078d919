"""Reading the packages' source for the rule tests (``test_import_rules.py``,
``test_source_rules.py``): which files a package has, their module names, and the
imports and attribute chains in their AST. Nothing here imports the code it reads."""

from __future__ import annotations

import ast
from dataclasses import dataclass
from pathlib import Path

REPO = Path(__file__).resolve().parents[1]
PACKAGES = REPO / "packages"
STAGES = ("frontend", "aot", "inductor")
ALL_PACKAGES = ("runtime", *STAGES)


@dataclass(frozen=True)
class Violation:
    """One broken rule, printed as ``file:line: message``."""

    file: str
    line: int
    message: str

    def __str__(self) -> str:
        return f"{self.file}:{self.line}: {self.message}"


@dataclass(frozen=True)
class Import:
    """One imported name: ``candidates`` are the modules it may be, most specific first
    (``from a import b`` may import the submodule ``a.b`` or the name ``b`` of ``a``)."""

    line: int
    candidates: tuple[str, ...]


def dotted(node: ast.expr) -> str | None:
    """``torch._dynamo.reset`` -> "torch._dynamo.reset"; None for anything else."""
    parts: list[str] = []
    while isinstance(node, ast.Attribute):
        parts.append(node.attr)
        node = node.value
    if not isinstance(node, ast.Name):
        return None
    parts.append(node.id)
    return ".".join(reversed(parts))


def within(module: str, prefix: str) -> bool:
    """True when ``module`` is ``prefix`` or lies below it."""
    return module == prefix or module.startswith(prefix + ".")


def _is_type_checking(test: ast.expr) -> bool:
    return dotted(test) in ("TYPE_CHECKING", "typing.TYPE_CHECKING")


class _ImportCollector(ast.NodeVisitor):
    def __init__(self, module_name: str, skip_type_checking: bool) -> None:
        # ``module_name`` of a package's __init__ ends in ".__init__", so that relative
        # imports anchor on the package itself.
        self.package = module_name.rsplit(".", 1)[0]
        self.skip_type_checking = skip_type_checking
        self.found: list[Import] = []

    def visit_If(self, node: ast.If) -> None:
        if self.skip_type_checking and _is_type_checking(node.test):
            for statement in node.orelse:
                self.visit(statement)
            return
        self.generic_visit(node)

    def visit_Import(self, node: ast.Import) -> None:
        self.found += [Import(node.lineno, (alias.name,)) for alias in node.names]

    def visit_ImportFrom(self, node: ast.ImportFrom) -> None:
        base = node.module or ""
        if node.level:
            anchor = self.package.split(".")
            anchor = anchor[: len(anchor) - (node.level - 1)]
            base = ".".join([*anchor, base] if base else anchor)
        self.found += [Import(node.lineno, (f"{base}.{alias.name}", base))
                       for alias in node.names]

    def visit_Call(self, node: ast.Call) -> None:
        callee = dotted(node.func) or ""
        if callee.split(".")[-1] in ("import_module", "__import__") and node.args:
            first = node.args[0]
            if isinstance(first, ast.Constant) and isinstance(first.value, str):
                self.found.append(Import(node.lineno, (first.value,)))
        self.generic_visit(node)


def imports_of(tree: ast.AST, module_name: str, *, skip_type_checking: bool = False
               ) -> list[Import]:
    """Every import in ``tree`` (module level and inside functions; relative imports
    resolved; ``importlib.import_module("...")`` / ``__import__("...")`` with a constant
    name). With ``skip_type_checking``, imports under ``if TYPE_CHECKING:`` are left out."""
    collector = _ImportCollector(module_name, skip_type_checking)
    collector.visit(tree)
    return collector.found


def imported_modules(tree: ast.AST, module_name: str) -> list[tuple[int, str]]:
    """(line, absolute module name) for every import in ``tree``; ``from a import b``
    yields both ``a`` and ``a.b`` (b may be a submodule)."""
    pairs = [(imp.line, name) for imp in imports_of(tree, module_name)
             for name in imp.candidates]
    return list(dict.fromkeys(pairs))


def source_files(owner: str) -> list[Path]:
    """The Python files of package ``owner``'s ``src`` tree, sorted."""
    return sorted((PACKAGES / owner / "src").rglob("*.py"))


def module_name(path: Path, owner: str) -> str:
    """``packages/aot/src/ember/aot/stage.py`` -> ``ember.aot.stage``; a package's
    ``__init__.py`` keeps its ``.__init__`` (relative imports anchor on it)."""
    relative = path.relative_to(PACKAGES / owner / "src").with_suffix("")
    return ".".join(relative.parts)


def relative(path: Path) -> str:
    """``path`` as the repository names it (``packages/aot/src/...``)."""
    return str(path.relative_to(REPO))
