"""Strict capture corpus, functions: each case compares with eager and asserts the number
of graphs, graph breaks and compiles (modules: ``test_strict_corpus_modules.py``)."""

from __future__ import annotations

import collections
import dataclasses
import math
import operator

import pytest
import torch
import torch.nn.functional as F
from strict_helpers import check

SCALE = 2.0
OFFSETS = [1.0, 2.0, 3.0]


def r(*shape: int) -> torch.Tensor:
    return torch.randn(*shape)


def helper_double(x):
    return x * 2


def helper_kwargs(x, *, alpha=1.0, beta=0.0):
    return x * alpha + beta


def helper_varargs(*xs, **kw):
    out = xs[0]
    for x in xs[1:]:
        out = out + x
    return out * kw.get("scale", 1.0)


GLOBAL_TENSOR = torch.arange(4.0)
Pair = collections.namedtuple("Pair", ["left", "right"])


@dataclasses.dataclass
class Settings:
    scale: float
    shift: float = 0.0

    def apply(self, x):
        return x * self.scale + self.shift


def c_dict_api(x):
    d = {"a": x, "b": x * 2}
    d.setdefault("c", x * 3)
    total = d.get("missing", x) + d.get("a")
    return {k: v + 1 for k, v in d.items() if k != "b"}, total, list(d.keys())


def c_nested_input(pairs):
    return sum(a * b for a, b in pairs)


def _collect(**kw):
    return sorted(kw.items())


def c_kwargs_collect(x):
    items = _collect(b=x * 2, a=x)
    return items[0][1] - items[1][1]


def c_star_unpack_in_call(x, y):
    xs = [x, y]
    return torch.cat([*xs, x * 2]), max(*[1, 5, 3])


def c_while_break_continue(x):
    i = 0
    while True:
        i += 1
        if i % 2 == 0:
            continue
        x = x + i
        if i > 5:
            break
    for j in range(3):
        if j == 5:
            break
    else:
        x = x * 2
    return x


def c_list_slices(x):
    xs = [x, x + 1, x + 2, x + 3]
    xs[1:3] = [x * 10]
    del xs[0]
    return torch.stack(xs[::-1]), len(xs)


def c_inplace_on_view(x):
    y = x.clone()
    y[:, 0].add_(1)
    y.narrow(1, 1, 2).mul_(3)
    return y


def c_masked_index_put(x):
    y = x.clone()
    y.masked_fill_(y < 0, 0.0)
    y[torch.tensor([0, 2])] = 7.0
    return y


def c_global_tensor(x):
    return x + GLOBAL_TENSOR


def _depth(x, n):
    if n == 0:
        return x
    return _depth(x * 2, n - 1) + 1


def c_recursion(x):
    return _depth(x, 3)


def c_user_object(x):
    settings = Settings(2.0, shift=1.0)
    return settings.apply(x), settings.scale


def c_object_argument(x, settings):
    return settings.apply(x) + settings.shift


def c_namedtuple(x):
    p = Pair(x, x * 2)
    return Pair(p.right, p.left + p[1])


def c_any_all(x):
    flags = [x.shape[0] > 1, x.ndim == 1]
    if any(flags) and not all(flags[:1] + [False]):
        return x + 1
    return x


def c_operator_module_calls(x):
    import functools

    return functools.reduce(operator.add, [x, x * 2, x * 3]), operator.itemgetter(1)([4, 5])


def c_getattr_dynamic(x, name):
    return getattr(x, name)()


def c_arith(x, y):
    return (x + y) * (x - y) / 2 ** 2 - x // 3 % 2


def c_python_if(x, n):
    if n > 2:
        return x + n
    return x - n


def c_while_loop(x):
    i = 0
    while i < 4:
        x = x * 1.5
        i += 1
    return x


def c_for_range(x):
    acc = torch.zeros_like(x)
    for i in range(1, 4):
        acc = acc + x * i
    return acc


def c_listcomp(x):
    parts = [x * i for i in range(3)]
    return torch.stack(parts).sum(0)


def c_dictcomp(x):
    d = {f"k{i}": x + i for i in range(3)}
    return d["k2"] - d["k0"]


def c_setcomp_len(x):
    s = {i % 2 for i in range(5)}
    return x * len(s)


def c_genexpr_sum(x):
    return sum([x * i for i in (1, 2, 3)])


def c_closure(x):
    k = 3

    def inner(y):
        return y * k

    return inner(x) + inner(x + 1)


def c_nested_closure_nonlocal(x):
    count = 0

    def bump(t):
        nonlocal count
        count += 1
        return t + count

    x = bump(x)
    x = bump(x)
    return x, count


def _gen_squares(x, n):
    for i in range(n):
        yield x * i


def c_generators(x):
    total = sum(t.sum() for t in _gen_squares(x, 3))
    return tuple(v + 1 for v in _gen_squares(x, 2)), total, all(i < 3 for i in range(3))


def c_try_except_no_raise(x):
    try:
        y = x * 2
    except RuntimeError:
        y = x
    finally:
        y = y + 1
    return y


def c_lambda(x):
    f = lambda t: t.sin() + 1
    return f(x) * f(x * 2)


def c_nested_calls(x):
    return helper_double(helper_double(x) + 1)


def c_kwargs_call(x):
    return helper_kwargs(x, alpha=2.0) + helper_kwargs(x, beta=1.0)


def c_varargs_call(x, y):
    return helper_varargs(x, y, x, scale=0.5)


def c_star_args(x, y):
    args = (x, y)
    kw = {"scale": 2.0}
    return helper_varargs(*args, **kw)


def c_tuple_unpack(x):
    a, b = x.chunk(2, dim=0)
    first, *rest = [a, b, a]
    return first + len(rest) * b


def c_list_manip(x):
    xs = [x]
    xs.append(x + 1)
    xs.extend([x * 2, x * 3])
    xs.insert(0, x - 1)
    last = xs.pop()
    return torch.cat(xs) + last.sum(), len(xs)


def c_dict_manip(x):
    d = {"a": x}
    d["b"] = x * 2
    d.update(c=x * 3)
    out = 0
    for k, v in d.items():  # noqa: PERF102 - tests items()
        out = out + v
    return out, sorted(d.keys())


def c_isinstance(x, y):
    if isinstance(y, (int, float)):
        return x * y
    return x + y


def c_globals(x):
    return x * SCALE + OFFSETS[1]


def c_math_operator(x):
    return operator.mul(x, math.sqrt(4.0)) + math.pi + max(1, 3) + min(2.0, 5.0) + abs(-2)


def c_shape_attrs(x):
    b, n = x.shape
    y = x.reshape(n, b)
    return y * x.ndim + x.size(0) + (1 if x.dtype == torch.float32 else 0)


def c_indexing(x):
    return x[0], x[:, 1:3], x[..., -1], x[x.shape[0] - 1, ::2]


def c_setitem(x):
    y = x.clone()
    y[0] = 0.5
    y[:, 1] = y[:, 2] * 2
    return y


def c_inplace(x):
    y = x.clone()
    y.add_(1).mul_(2)
    y.relu_()
    return y


def c_inplace_input(x):
    x.mul_(2)
    return x + 1


def c_no_grad(x, w):
    with torch.no_grad():
        y = x @ w
    return y * 2


def c_enumerate_zip(x, y):
    out = []
    for i, (a, b) in enumerate(zip(x.unbind(0), y.unbind(0))):
        out.append(a * i + b)
    return torch.stack(out)


def c_iterate_tensor(x):
    total = 0
    for row in x:
        total = total + row
    return total


def c_reversed_sorted(x):
    vals = sorted([3, 1, 2])
    out = x
    for v in reversed(vals):
        out = out * v
    return out


def c_tuple_input(pair):
    a, b = pair
    return a @ b


def c_list_input(xs):
    return torch.stack(xs).mean(0) + len(xs)


def c_dict_input(d):
    return d["x"] * d["scale"]


def c_none_default(x, mask=None):
    if mask is not None:
        return x * mask
    return x


def c_string_format(x):
    name = f"layer_{x.shape[0]}"
    return x * len(name)


def c_multiple_outputs(x):
    return x.max(dim=1), x.min()


def c_f_functional(x):
    return F.softmax(F.layer_norm(x, (x.shape[-1],)), dim=-1) + F.dropout(x, 0.5,
                                                                            training=False)


def c_ternary_and_or(x, flag):
    y = x * 2 if flag else x
    z = flag and 3 or 4
    return y + z


def c_bool_ops(x):
    a, b = 3, 0
    if a and not b:
        x = x + 1
    if b or a > 2:
        x = x * 2
    return x


def c_integer_tensor(x):
    idx = torch.argmax(x, dim=1)
    return (idx * 2 + 1) % 3, (x > 0).sum(), torch.where(x > 0, x, -x)


def c_view_ops(x):
    y = x.view(2, -1).transpose(0, 1).contiguous()
    return y.unsqueeze(0).expand(3, -1, -1).permute(2, 0, 1)


def c_new_tensors(x):
    return x + torch.ones(x.shape) * torch.arange(x.shape[1]) + torch.tensor(2.0)


def c_chained_compare(x, n):
    if 0 < n < 5:
        return x * n
    return x


FUNCTIONS = [
    (c_arith, lambda: (r(3, 4), r(3, 4)), 1, 0),
    (c_python_if, lambda: (r(3), 3), 1, 0),
    (c_while_loop, lambda: (r(5),), 1, 0),
    (c_for_range, lambda: (r(5),), 1, 0),
    (c_listcomp, lambda: (r(4),), 1, 0),
    (c_dictcomp, lambda: (r(4),), 1, 0),
    (c_setcomp_len, lambda: (r(4),), 1, 0),
    (c_genexpr_sum, lambda: (r(4),), 1, 0),
    (c_closure, lambda: (r(4),), 1, 0),
    (c_nested_closure_nonlocal, lambda: (r(4),), 1, 0),
    (c_lambda, lambda: (r(4),), 1, 0),
    (c_generators, lambda: (r(4),), 1, 0),
    (c_try_except_no_raise, lambda: (r(4),), 1, 0),
    (c_nested_calls, lambda: (r(4),), 1, 0),
    (c_kwargs_call, lambda: (r(4),), 1, 0),
    (c_varargs_call, lambda: (r(4), r(4)), 1, 0),
    (c_star_args, lambda: (r(4), r(4)), 1, 0),
    (c_tuple_unpack, lambda: (r(4, 3),), 1, 0),
    (c_list_manip, lambda: (r(2, 3),), 1, 0),
    (c_dict_manip, lambda: (r(3),), 1, 0),
    (c_isinstance, lambda: (r(3), 2.5), 1, 0),
    (c_globals, lambda: (r(3),), 1, 0),
    (c_math_operator, lambda: (r(3),), 1, 0),
    (c_shape_attrs, lambda: (r(2, 6),), 1, 0),
    (c_indexing, lambda: (r(4, 5),), 1, 0),
    (c_setitem, lambda: (r(3, 4),), 1, 0),
    (c_inplace, lambda: (r(3, 4),), 1, 0),
    (c_inplace_input, lambda: (r(3, 4),), 1, 0),
    (c_no_grad, lambda: (r(3, 4), r(4, 2)), 1, 0),
    (c_enumerate_zip, lambda: (r(3, 4), r(3, 4)), 1, 0),
    (c_iterate_tensor, lambda: (r(3, 4),), 1, 0),
    (c_reversed_sorted, lambda: (r(3),), 1, 0),
    (c_tuple_input, lambda: ((r(3, 4), r(4, 2)),), 1, 0),
    (c_list_input, lambda: ([r(3), r(3), r(3)],), 1, 0),
    (c_dict_input, lambda: ({"x": r(3), "scale": 3},), 1, 0),
    (c_none_default, lambda: (r(3),), 0, 0),
    (c_string_format, lambda: (r(3),), 1, 0),
    (c_multiple_outputs, lambda: (r(3, 4),), 1, 0),
    (c_f_functional, lambda: (r(3, 4),), 1, 0),
    (c_ternary_and_or, lambda: (r(3), True), 1, 0),
    (c_bool_ops, lambda: (r(3),), 1, 0),
    (c_integer_tensor, lambda: (r(3, 4),), 1, 0),
    (c_view_ops, lambda: (r(4, 6),), 1, 0),
    (c_new_tensors, lambda: (r(3, 4),), 1, 0),
    (c_chained_compare, lambda: (r(3), 2), 1, 0),
    (c_dict_api, lambda: (r(3),), 1, 0),
    (c_nested_input, lambda: ([(r(3), r(3)), (r(3), r(3))],), 1, 0),
    (c_kwargs_collect, lambda: (r(3),), 1, 0),
    (c_star_unpack_in_call, lambda: (r(2), r(2)), 1, 0),
    (c_while_break_continue, lambda: (r(3),), 1, 0),
    (c_list_slices, lambda: (r(3),), 1, 0),
    (c_inplace_on_view, lambda: (r(3, 4),), 1, 0),
    (c_masked_index_put, lambda: (r(4, 3),), 1, 0),
    (c_global_tensor, lambda: (r(4),), 1, 0),
    (c_recursion, lambda: (r(3),), 1, 0),
    (c_user_object, lambda: (r(3),), 1, 0),
    (c_object_argument, lambda: (r(3), Settings(3.0, 0.5)), 1, 0),
    (c_namedtuple, lambda: (r(3),), 1, 0),
    (c_any_all, lambda: (r(3),), 1, 0),
    (c_operator_module_calls, lambda: (r(3),), 1, 0),
    (c_getattr_dynamic, lambda: (r(3), "relu"), 1, 0),
]


@pytest.mark.parametrize("fn,make_args,graphs,breaks", FUNCTIONS,
                         ids=[f[0].__name__ for f in FUNCTIONS])
def test_function(fn, make_args, graphs, breaks):
    torch.manual_seed(0)
    check(fn, *make_args(), graphs=graphs, breaks=breaks, compiles=max(graphs, 1) + breaks)
