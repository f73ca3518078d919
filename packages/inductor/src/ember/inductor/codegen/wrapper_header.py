"""The module-level lines of a generated wrapper, before its ``call``.

A wrapper is written by this inductor and run by whichever ember-runtime is installed
(``ember-runtime>=0.4.1,<0.5``). What it takes from a runtime newer than the oldest it
accepts, it imports itself, beside what an older runtime does instead:

* the input stamp (:data:`INPUT_STAMP_IMPORT`): the inputs' metadata in one C++ check;
* the allocator (:func:`allocator_lines`): ``_empty(sizes, strides, dtype)``, torch's
  C++ allocation for the wrapper's device (``ember.runtime.compiled.wrapper_support
  .allocator``). ``empty_strided(sizes, strides, dtype=..., device='cpu')`` parses its
  keywords and the device's text on every call: ~1.9 us against ~0.5 us on the CPU
  machine, for hundreds of buffers a training step;
* the read view (:data:`READ_VIEW_LINES`): ``_read_view(t, sizes, strides, offset)``,
  for a view that needs no autograd view record (an operand a matmul reads, a buffer
  placed in a dead buffer's memory, which no one else sees), made without
  autograd's view record (``ember.runtime.compiled.wrapper_support.read_view``): ~0.6
  us against ``Tensor.as_strided``'s ~1.2 us on the CPU machine, hundreds a step.
"""

from __future__ import annotations

INPUT_STAMP_IMPORT = [
    "# ember-runtime 0.4.2+: the inputs' metadata in one C++ check (an older runtime has",
    "# no input stamp: every input is tested every call)",
    "try:",
    "    from ember.runtime.input_stamp import InputStamp as _InputStamp",
    "    _inputs = _InputStamp()",
    "except ImportError:",
    "    _inputs = None",
    "",
    "",
]
"""The wrapper's module-level lines that make its input stamp (one per loaded wrapper)."""


def allocator_lines(device: str) -> list[str]:
    """The module-level lines that define ``_empty`` for buffers on ``device``."""
    return [
        "# ember-runtime 0.4.2+: buffers allocated without parsing a device each time (an",
        "# older runtime: torch.empty_strided)",
        "try:",
        "    from ember.runtime.compiled.wrapper_support import allocator as _allocator",
        f"    _empty = _allocator({device!r})",
        "except ImportError:",
        "    def _empty(sizes, strides, dtype):",
        f"        return empty_strided(sizes, strides, dtype=dtype, device={device!r})",
        "",
        "",
    ]


READ_VIEW_LINES = [
    "# ember-runtime 0.4.2+: views no autograd record is needed for, made without it (an",
    "# older runtime: Tensor.as_strided)",
    "try:",
    "    from ember.runtime.compiled.wrapper_support import read_view as _read_view_maker",
    "    _read_view = _read_view_maker()",
    "except ImportError:",
    "    def _read_view(t, sizes, strides, offset):",
    "        return t.as_strided(sizes, strides, t.storage_offset() + offset)",
    "",
    "",
]
"""The module-level lines that define ``_read_view``."""
