"""The IR layer (ember.runtime.ir) depends on nothing above it in the runtime; the
``compiled`` dialect's check comes from the compiled package through a registration."""

from __future__ import annotations

import ast
from pathlib import Path

import pytest
from ember.runtime.ir import VerificationError, verify
from ember.runtime.ir import verifier as verifier_module
from handbuilt import mlp_program

IR_DIR = Path(verifier_module.__file__).parent


def _imported_modules(path: Path, package: str = "ember.runtime.ir") -> list[tuple[int, str]]:
    """Every module ``path`` (a module of ``package``) imports, at any depth
    (function-level imports included), with relative imports resolved."""
    found: list[tuple[int, str]] = []
    for node in ast.walk(ast.parse(path.read_text(), str(path))):
        if isinstance(node, ast.Import):
            found += [(node.lineno, alias.name) for alias in node.names]
        elif isinstance(node, ast.ImportFrom):
            if node.level:
                base = package.rsplit(".", node.level - 1)[0]
                if node.module:
                    found.append((node.lineno, f"{base}.{node.module}"))
                else:  # ``from .. import config`` imports submodule ember.runtime.config
                    found += [(node.lineno, f"{base}.{alias.name}") for alias in node.names]
            elif node.module is not None:
                found.append((node.lineno, node.module))
    return sorted(found)


def _package_of(path: Path) -> str:
    parts = path.parent.relative_to(IR_DIR).parts
    return ".".join(("ember.runtime.ir", *parts))


def _outside_ir(module: str) -> bool:
    inside = module == "ember.runtime.ir" or module.startswith("ember.runtime.ir.")
    return module.split(".")[0] == "ember" and not inside


def test_ir_imports_nothing_above_itself() -> None:
    sources = sorted(IR_DIR.rglob("*.py"))
    assert len(sources) > 10, f"found only {len(sources)} IR modules in {IR_DIR}"
    offenders = [f"{path.relative_to(IR_DIR)}:{line} imports {module}"
                 for path in sources
                 for line, module in _imported_modules(path, _package_of(path))
                 if _outside_ir(module)]
    assert not offenders, ("ember.runtime.ir must import nothing from the runtime above "
                           "it:\n" + "\n".join(offenders))


def test_the_import_scan_sees_function_level_imports(tmp_path: Path) -> None:
    sample = tmp_path / "sample.py"
    sample.write_text("def f():\n    from ember.runtime.compiled.loader import LAUNCHERS\n"
                      "from . import graph\nfrom .. import config\n")
    flagged = [m for _, m in _imported_modules(sample) if _outside_ir(m)]
    assert flagged == ["ember.runtime.compiled.loader", "ember.runtime.config"]
    nested = [m for _, m in _imported_modules(sample, "ember.runtime.ir.contracts")
              if _outside_ir(m)]
    assert nested == ["ember.runtime.compiled.loader"]  # ``..`` is ember.runtime.ir there


def test_compiled_check_is_registered_by_the_compiled_package() -> None:
    from ember.runtime.compiled.loader import verify_compiled

    assert verifier_module._PROGRAM_CHECKS["compiled"] is verify_compiled


def test_compiled_dialect_without_a_registered_check_is_a_clear_error(
        monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.delitem(verifier_module._PROGRAM_CHECKS, "compiled")
    program, _ = mlp_program()
    program.dialect = "compiled"
    with pytest.raises(VerificationError, match="no check is registered for the 'compiled' "
                                                "dialect; import ember.runtime.compiled"):
        verify(program, "compiled")


def test_registering_a_check_for_an_unknown_dialect_fails() -> None:
    with pytest.raises(VerificationError, match="unknown dialect 'nope'"):
        verifier_module.register_program_check("nope", lambda program: None)
