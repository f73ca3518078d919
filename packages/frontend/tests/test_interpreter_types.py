"""The bytecode interpreter's handlers take a decoded :class:`Instruction` (typed, not
``Any``), and its argument/jump accessors fail loudly on instructions without them."""

from __future__ import annotations

import inspect
import typing
from pathlib import Path
from typing import Any

import pytest
from ember.frontend.bytecode import opcodes
from ember.frontend.bytecode.frame import Frame
from ember.frontend.bytecode.interpreter import Interpreter
from ember.frontend.bytecode.opcodes import Instruction

SOURCE_ROOT = Path(opcodes.__file__).resolve().parents[1]
# NOTE: the exception and ``with`` handlers are typed with the grad-mode work (#12)
UNTYPED_ELSEWHERE = {"exception_ops"}


def handlers() -> list[tuple[str, typing.Callable[..., None]]]:
    return [(name, fn) for name, fn in inspect.getmembers(Interpreter, inspect.isfunction)
            if name.startswith("op_")]


def test_there_are_handlers_of_every_family() -> None:
    families = {fn.__module__.rsplit(".", 1)[-1] for _, fn in handlers()}
    assert {"interpreter", "data_ops", "attributes", "exception_ops"} <= families


@pytest.mark.parametrize("name", [n for n, _ in handlers()])
def test_handler_takes_an_instruction(name: str) -> None:
    fn = getattr(Interpreter, name)
    hints = typing.get_type_hints(fn)
    if fn.__module__.rsplit(".", 1)[-1] in UNTYPED_ELSEWHERE and hints["ins"] is Any:
        pytest.skip("typed with the grad-mode work on exception_ops.py")
    assert hints["f"] is Frame and hints["ins"] is Instruction, (name, hints)
    assert hints["return"] is type(None)


def test_frontend_files_stay_under_600_lines() -> None:
    long = {str(p.relative_to(SOURCE_ROOT)): n for p in SOURCE_ROOT.rglob("*.py")
            if (n := len(p.read_text().splitlines())) > 600}
    assert not long, long


def test_missing_argument_and_jump_target_are_named() -> None:
    ins = Instruction("RETURN_VALUE", None, None, 12, 3)
    with pytest.raises(ValueError, match="RETURN_VALUE at offset 12 has no argument"):
        ins.oparg  # noqa: B018
    with pytest.raises(ValueError, match="RETURN_VALUE at offset 12 has no jump target"):
        ins.jump_target  # noqa: B018
    jump = Instruction("JUMP", 2, 8, 4, 1, target=5)
    assert (jump.oparg, jump.jump_target) == (2, 5)
