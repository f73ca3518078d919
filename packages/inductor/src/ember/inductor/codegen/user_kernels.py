"""What the wrapper writes above a user Triton kernel's extern call: the kernel's key,
grid and written arguments, and its source (the text the program carries in
``user_kernels/...``), as comments, so that ``EMBER_LOGS=output_code`` shows the code
that runs. The call itself is the ``ember::triton_kernel`` operator, which launches the
user's kernel object on copies of what it writes (``ember.runtime.user_kernels``), or its
in-place twin ``ember::triton_kernel_`` on buffers the call owns
(``lowering/user_kernels.py``)."""

from __future__ import annotations

from ember.inductor.buffers import ExternCall
from ember.inductor.lowering.extern_args import ConstantArg
from ember.runtime.user_kernel_spec import kernel_source, resolve_kernel
from ember.runtime.user_kernels import IN_PLACE_TARGET, TARGET, parse_call

__all__ = ["is_user_kernel", "user_kernel_comment"]


def is_user_kernel(call: ExternCall) -> bool:
    """Whether ``call`` launches a user Triton kernel."""
    return call.target in (TARGET, IN_PLACE_TARGET)


def user_kernel_comment(call: ExternCall) -> list[str]:
    """The comment lines (without ``#``) that describe ``call``'s kernel, its source
    last.

    Raises:
        IRFormatError: the kernel cannot be resolved in this process, or its source
            changed since capture.
        TypeError: ``call`` has no spec text (not an ``ember::triton_kernel`` call).
    """
    spec = call.args[3] if len(call.args) > 3 else None
    if not isinstance(spec, ConstantArg) or not isinstance(spec.value, str):
        raise TypeError(f"{TARGET} without its spec text: {call.args!r}")
    launch = parse_call(spec.value)
    source = kernel_source(resolve_kernel(launch))
    writes = ", ".join(str(w) for w in launch.writes) or "none"
    on = "on them in place" if call.target == IN_PLACE_TARGET else "on copies of them"
    header = (f"user Triton kernel {launch.kernel} (source {launch.source_file}); "
              f"writes tensors [{writes}] (the call launches it {on})")
    lines = [header]
    if len(launch.grids) > 1:
        configs = "; ".join(str(dict(g.when)) for g in launch.grids)
        lines.append(f"autotuned: {len(launch.grids)} grids, one per config: {configs}")
    lines += [f"| {line}" if line else "|" for line in source.text.splitlines()]
    return lines
