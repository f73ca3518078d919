"""Rules on the source itself, enforced by reading it (docs/architecture.md, "torch and
Triton"; ``/STYLE``: no file of thousands of lines).

- Private torch APIs are used only in a package's ``_torch.py`` (``ember/<stage>/_torch.py``,
  ``ember/runtime/ir/_torch.py`` for the IR layer, which imports nothing above it, and
  ``ember/runtime/compiled/_torch.py`` for running a loaded program, which must stay
  light), so
  that a torch upgrade that moves one touches one file. Private means a name starting with
  one underscore anywhere in a ``torch`` module path or attribute chain (``torch._ops``,
  ``torch.utils._pytree``, ``torch._C._foo``, ``getattr(torch, "_C")``), imported or used,
  and the private attributes of operator overloads (``op._schema``, ``op._overloadname``,
  ``op._overloadpacket``). Operators reached through ``torch.ops`` are public whatever
  their name (``torch.ops.aten._to_copy``). Found in the AST: strings and comments do not
  count.
- No Python file is longer than :data:`MAX_LINES` lines, in the packages' sources and
  tests, ``integration_tests``, ``testing`` and ``tools``.
"""

from __future__ import annotations

import ast
from pathlib import Path

import pytest
from source_scan import ALL_PACKAGES, PACKAGES, REPO, Violation, dotted, relative, source_files

# Private attributes of torch's OpOverload, whatever the name of the object they are read on.
PRIVATE_OPERATOR_ATTRIBUTES = ("_schema", "_overloadname", "_overloadpacket")
# Below this prefix a leading underscore names an operator, not a private API.
OPERATOR_NAMESPACES = "torch.ops."
MAX_LINES = 600
# Where the length rule applies (every .py file below these, relative to the repository).
LENGTH_RULE_ROOTS = ("packages", "integration_tests", "testing", "tools")


def _is_private(part: str) -> bool:
    return part.startswith("_") and not part.startswith("__")


def _first_private(path: str) -> str | None:
    """``torch.utils._pytree.tree_map`` -> "torch.utils._pytree"; None when the path is
    public or not a torch one."""
    parts = path.split(".")
    if parts[0] != "torch" or path.startswith(OPERATOR_NAMESPACES):
        return None
    for i, part in enumerate(parts[1:], start=1):
        if _is_private(part):
            return ".".join(parts[: i + 1])
    return None


def _torch_aliases(tree: ast.AST) -> dict[str, str]:
    """Local names bound to torch modules: ``import torch`` (torch), ``import torch.nn as
    nn`` (nn -> torch.nn), ``from torch import nn`` (nn -> torch.nn)."""
    aliases: dict[str, str] = {}
    for node in ast.walk(tree):
        if isinstance(node, ast.Import):
            for alias in node.names:
                if alias.name.split(".")[0] != "torch":
                    continue
                if alias.asname:
                    aliases[alias.asname] = alias.name
                else:
                    aliases["torch"] = "torch"
        elif (isinstance(node, ast.ImportFrom) and not node.level and node.module
              and node.module.split(".")[0] == "torch"):
            for alias in node.names:
                aliases[alias.asname or alias.name] = f"{node.module}.{alias.name}"
    return aliases


def _imported_paths(node: ast.Import | ast.ImportFrom) -> list[str]:
    if isinstance(node, ast.Import):
        return [alias.name for alias in node.names]
    if node.level or not node.module:
        return []
    return [node.module, *(f"{node.module}.{alias.name}" for alias in node.names)]


def _resolve(chain: str, aliases: dict[str, str]) -> str | None:
    root, _, rest = chain.partition(".")
    if root not in aliases:
        return None
    return f"{aliases[root]}.{rest}" if rest else aliases[root]


def check_private_torch(source: str, file: str) -> list[Violation]:
    """Every use of a private torch API in one file (the caller leaves out ``_torch.py``)."""
    tree = ast.parse(source, filename=file)
    aliases = _torch_aliases(tree)
    advice = "use it through the package's _torch.py"
    violations: list[Violation] = []
    for node in ast.walk(tree):
        if isinstance(node, (ast.Import, ast.ImportFrom)):
            imported = {p for p in map(_first_private, _imported_paths(node)) if p}
            violations += [Violation(file, node.lineno, f"imports private torch API {p}: "
                                                        f"{advice}") for p in sorted(imported)]
        elif isinstance(node, ast.Attribute):
            resolved = _resolve(dotted(node) or "", aliases)
            inner = _resolve(dotted(node.value) or "", aliases)
            # Report the shortest private chain only, not every longer one around it.
            private = _first_private(resolved) if resolved else None
            if private and not (inner and _first_private(inner)):
                violations.append(Violation(file, node.lineno,
                                            f"uses private torch API {private}: {advice}"))
            elif (node.attr in PRIVATE_OPERATOR_ATTRIBUTES and not resolved
                  and dotted(node.value) not in ("self", "cls")):
                violations.append(Violation(file, node.lineno, f"uses the private operator "
                                                               f"attribute .{node.attr}: {advice}"))
        elif isinstance(node, ast.Call) and dotted(node.func) == "getattr" and len(node.args) > 1:
            owner, name = node.args[0], node.args[1]
            resolved = _resolve(dotted(owner) or "", aliases)
            if (resolved and isinstance(name, ast.Constant) and isinstance(name.value, str)):
                private = _first_private(f"{resolved}.{name.value}")
                if private:
                    violations.append(Violation(file, node.lineno, f"uses private torch "
                                                                   f"API {private}: {advice}"))
    return sorted(violations, key=lambda v: v.line)


def test_no_private_torch_api_outside_torch_py() -> None:
    violations: list[Violation] = []
    for owner in ALL_PACKAGES:
        for path in source_files(owner):
            if path.name != "_torch.py":
                violations += check_private_torch(path.read_text(), relative(path))
    assert not violations, "private torch APIs outside _torch.py:\n" + "\n".join(
        map(str, violations))


# -- file length ---------------------------------------------------------------------------


def length_rule_files() -> list[Path]:
    """The Python files the length rule reads (not virtual environments or caches)."""
    files: list[Path] = []
    for root in LENGTH_RULE_ROOTS:
        for path in sorted((REPO / root).rglob("*.py")):
            parts = path.relative_to(REPO).parts
            if not any(p.startswith(".") or p in ("__pycache__", "build") for p in parts):
                files.append(path)
    return files


def check_length(source: str, file: str, limit: int = MAX_LINES) -> list[Violation]:
    """A violation when ``source`` has more than ``limit`` lines."""
    lines = len(source.splitlines())
    if lines <= limit:
        return []
    return [Violation(file, limit + 1, f"{lines} lines, over the limit of {limit}: split the "
                                       "file by concept")]


def test_length_rule_reads_every_package() -> None:
    files = {relative(p) for p in length_rule_files()}
    for owner in ALL_PACKAGES:
        assert any(f.startswith(f"packages/{owner}/src/") for f in files), owner
        assert any(f.startswith(f"packages/{owner}/tests/") for f in files), owner
    assert any(f.startswith("tools/") for f in files)
    assert any(f.startswith("testing/ember_testing/") for f in files)
    assert "integration_tests/test_source_rules.py" in files
    assert PACKAGES.is_dir()


def test_no_file_over_max_lines() -> None:
    violations: list[Violation] = []
    for path in length_rule_files():
        violations += check_length(path.read_text(), relative(path))
    assert not violations, "files too long:\n" + "\n".join(map(str, violations))


# -- the checkers themselves catch what they should -----------------------------------------


@pytest.mark.parametrize(("source", "expected"), [
    ("import torch._C", "imports private torch API torch._C"),
    ("from torch._ops import OpOverload", "imports private torch API torch._ops"),
    ("from torch import _C", "imports private torch API torch._C"),
    ("import torch.utils._pytree as pytree", "imports private torch API torch.utils._pytree"),
    ("def f():\n    from torch._decomp import table", "imports private torch API torch._decomp"),
    ("import torch\nx: torch._ops.OpOverload", "uses private torch API torch._ops"),
    ("import torch\ntorch._C._dispatch_get_all_op_names()", "uses private torch API torch._C"),
    ("import torch as t\nt._assert_async(x)", "uses private torch API torch._assert_async"),
    ("import torch.nn.functional as F\nF._canonical_mask(m)",
     "uses private torch API torch.nn.functional._canonical_mask"),
    ("from torch import nn\nnn.modules._utils", "uses private torch API torch.nn.modules._utils"),
    ("import torch\ngetattr(torch, '_C')", "uses private torch API torch._C"),
    ("def f(op):\n    return op._schema.name", "uses the private operator attribute ._schema"),
    ("name = resolve('x')._overloadname", "uses the private operator attribute ._overloadname"),
    ("op.overloadpacket._overloadpacket", "uses the private operator attribute ._overloadpacket"),
])
def test_private_torch_checker_flags(source: str, expected: str) -> None:
    violations = check_private_torch(source, "x.py")
    assert [v.message.split(":")[0] for v in violations] == [expected], violations
    assert violations[0].message.endswith("use it through the package's _torch.py")


@pytest.mark.parametrize("source", [
    "import torch\nop = torch.ops.aten._to_copy.default",
    "import torch\nprint(torch.__version__)",
    "# torch._C in a comment\nx = 'torch._ops.OpOverload'",
    "from ember.runtime._torch import OpOverload, op_schema\nop_schema(op).name",
    "import torch.nn.functional as F\ny = F.gelu(x)",
    "from torch.utils import data\nx = other._C",
    "class A:\n    def f(self):\n        return self._schema",
    "from . import _torch\n_torch.pytree",
])
def test_private_torch_checker_allows(source: str) -> None:
    assert check_private_torch(source, "x.py") == []


def test_length_checker_flags_and_allows() -> None:
    assert check_length("x = 1\n" * 600, "x.py") == []
    [violation] = check_length("x = 1\n" * 601, "x.py")
    assert str(violation) == ("x.py:601: 601 lines, over the limit of 600: split the file "
                              "by concept")


def test_no_two_test_files_share_a_name() -> None:
    # The suite runs every test directory in one pytest session with its default import
    # mode: two test modules of one basename make the second fail to import ("import
    # file mismatch"), which only the full suite shows.
    seen: dict[str, Path] = {}
    clashes: list[str] = []
    for root in LENGTH_RULE_ROOTS:
        for path in sorted((REPO / root).rglob("test_*.py")):
            if ".venv" in path.parts:
                continue
            earlier = seen.setdefault(path.name, path)
            if earlier != path:
                clashes.append(f"{relative(earlier)} and {relative(path)}")
    assert not clashes, "test files sharing a name: " + "; ".join(clashes)
