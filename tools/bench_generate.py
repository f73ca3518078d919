"""Greedy HF GPT-2 ``generate`` with ``forward`` compiled by eager, torch.compile and Ember.

    python tools/bench_generate.py [--device cpu|cuda] [--compilers eager,torch,ember] \\
        [--layers 12] [--hidden 768] [--heads H] [--vocab 50257] [--dtype bfloat16] \\
        [--batch 4] [--prompt 32] [--new-tokens 128] [--no-cache] [--cpu] \\
        [--ember-backend inductor] [--dynamic none|true|false] [--ember-option KEY=VALUE] \\
        [--json OUT] [--markdown OUT]

Defaults: the small configuration of issue #15 (12 layers, 768 wide, random weights, batch
4, 32-token prompts, 128 new tokens; bf16 on CUDA, fp32 on CPU). ``--cpu``: a tiny
configuration on the CPU (2 layers, 64 wide, 32 new tokens), seconds. In one process, per
compiler: ``model.forward = compiled`` on a copy of the model, the first ``generate``
timed (compilation included), then the second; the compiles, graph breaks and eager
fallback calls each compiler reports; whether the new tokens equal eager's.
"""

from __future__ import annotations

import argparse
import dataclasses
import json
import sys
from pathlib import Path
from typing import Any

sys.path.insert(0, str(Path(__file__).resolve().parent))

import torch
from benchlib import compilers, generate, report

_DYNAMIC = {"none": None, "true": True, "false": False}


def parse_args(argv: list[str] | None = None) -> argparse.Namespace:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--device", choices=("cpu", "cuda"),
                        default="cuda" if torch.cuda.is_available() else "cpu")
    parser.add_argument("--compilers", default="eager,torch,ember",
                        help="comma-separated subset of " + ",".join(compilers.COMPILERS))
    parser.add_argument("--cpu", action="store_true",
                        help="the tiny configuration on the CPU (overrides --device and the "
                             "model sizes not given explicitly)")
    defaults = generate.GenerateConfig()
    for name in ("layers", "hidden", "heads", "vocab", "batch", "prompt", "new_tokens"):
        parser.add_argument("--" + name.replace("_", "-"), type=int, default=None,
                            help=f"default {getattr(defaults, name)} "
                                 f"(--cpu: {getattr(generate.TINY, name)})")
    parser.add_argument("--dtype", default=None,
                        help="float32, bfloat16 or float16 (default: bfloat16 on CUDA, "
                             "float32 on CPU)")
    parser.add_argument("--no-cache", action="store_true",
                        help="generate without the KV cache (the whole sequence each step)")
    parser.add_argument("--ember-backend", default="inductor", choices=compilers.EMBER_BACKENDS)
    parser.add_argument("--dynamic", default="none", choices=tuple(_DYNAMIC),
                        help="dynamic= of torch.compile and Ember (default none: automatic)")
    parser.add_argument("--ember-option", action="append", default=[], metavar="KEY=VALUE",
                        help="an Ember options= entry (repeatable)")
    parser.add_argument("--json", metavar="OUT", help="also write the results as JSON")
    parser.add_argument("--markdown", metavar="OUT", help="also write the table as Markdown")
    args = parser.parse_args(argv)
    args.compiler_list = [c.strip() for c in args.compilers.split(",") if c.strip()]
    for c in args.compiler_list:
        if c not in compilers.COMPILERS:
            parser.error(f"unknown compiler {c!r}; expected some of {compilers.COMPILERS}")
    if "eager" in args.compiler_list:  # eager first: the tokens to match
        args.compiler_list.remove("eager")
        args.compiler_list.insert(0, "eager")
    if args.cpu:
        args.device = "cpu"
    base = generate.TINY if args.cpu else defaults
    sizes = {name: getattr(args, name) for name in
             ("layers", "hidden", "heads", "vocab", "batch", "prompt", "new_tokens")
             if getattr(args, name) is not None}
    for name, value in sizes.items():
        if value < 1:
            parser.error(f"--{name.replace('_', '-')} {value}: expected at least 1")
    args.config = dataclasses.replace(base, use_cache=not args.no_cache, **sizes)
    dtype_name = args.dtype or ("bfloat16" if args.device == "cuda" else "float32")
    args.torch_dtype = getattr(torch, dtype_name, None)
    if not isinstance(args.torch_dtype, torch.dtype) or not args.torch_dtype.is_floating_point:
        parser.error(f"unknown floating dtype {dtype_name!r}")
    if args.device == "cuda" and not torch.cuda.is_available():
        parser.error("--device cuda: no CUDA device is available")
    try:
        args.ember_options = compilers.parse_ember_options(args.ember_option)
    except ValueError as error:
        parser.error(str(error))
    return args


def main(argv: list[str] | None = None) -> int:
    args = parse_args(argv)
    device = torch.device(args.device)
    config: generate.GenerateConfig = args.config
    model = generate.build_model(config, device, args.torch_dtype)
    ids = generate.prompt_ids(config, device)
    rows: list[generate.GenerateRow] = []
    reference: torch.Tensor | None = None
    for compiler in args.compiler_list:
        dynamic = None if compiler == "eager" else _DYNAMIC[args.dynamic]
        row, out = generate.run_compiler(compiler, model, ids, config, reference,
                                         ember_backend=args.ember_backend, dynamic=dynamic,
                                         ember_options=args.ember_options or None)
        if compiler == "eager" and out is not None:
            reference = out
            row.tokens = row.tokens_equal = out[:, ids.shape[1]:].numel()
        rows.append(row)
        print(f"{row.label}: first {row.first_s}, second {row.second_s}"
              + (f" ({row.error})" if row.error else ""), file=sys.stderr, flush=True)
    meta: dict[str, Any] = report.environment(device)
    meta.update(config=dataclasses.asdict(config), dtype=str(args.torch_dtype),
                dynamic=args.dynamic, ember_backend=args.ember_backend)
    print(" ".join(f"{k}={v}" for k, v in meta.items() if k not in ("command", "config")))
    print(_describe(config, args.torch_dtype))
    print(generate.table(rows, config))
    for line in generate.verdict(rows):
        print(line)
    if args.json:
        Path(args.json).write_text(json.dumps(
            {"meta": meta, "rows": [dataclasses.asdict(r) for r in rows]}, indent=2) + "\n")
        print(f"wrote {args.json}")
    if args.markdown:
        text = [f"Command: `{meta['command']}`", "",
                f"{meta['date']}; torch {meta['torch']}; device {meta['device']}; "
                + _describe(config, args.torch_dtype), "",
                generate.table(rows, config, markdown=True), ""]
        text += [f"- {line}" for line in generate.verdict(rows)]
        Path(args.markdown).write_text("\n".join(text) + "\n")
        print(f"wrote {args.markdown}")
    return 0


def _describe(config: generate.GenerateConfig, dtype: torch.dtype) -> str:
    return (f"GPT-2 {config.layers} layers x {config.hidden} wide, {config.head_count} heads, "
            f"vocab {config.vocab}, {str(dtype).removeprefix('torch.')}, random weights; "
            f"batch {config.batch}, {config.prompt}-token prompts, {config.new_tokens} new "
            f"tokens, greedy, KV cache {'on' if config.use_cache else 'off'}")


if __name__ == "__main__":
    sys.exit(main())
