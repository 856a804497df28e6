"""Shrinking a disagreement: first the smallest window of consecutive statements that still shows
it (its inputs made literal from JAX's values of the variables it reads), which names the defect's
op and so its signature; then smaller input shapes and rounder values, for a short repro.
Runs in the parent; every candidate is checked in a worker (pool.py), so crashes shrink too."""
import copy

import numpy as np

from .pool import Crash, FuzzerError
from .program import Program, canonical, is_inexact, np_dtype


def signature(prog, transform, cls):
    """(op, transformation, dtype, class): the defect's identity used for dedup and known.py."""
    dts = []
    for v in prog.inputs.values():
        name = "bfloat16" if v.dtype == np_dtype("bfloat16") else v.dtype.name
        d = canonical(name, prog.x64)
        if d not in dts:
            dts.append(d)
    return ("+".join(prog.ops()), transform, ",".join(dts) or "-", cls)


def outcome(worker, prog, transform):
    """compare.check's tuple for prog in the worker (a crash is a result too)."""
    try:
        return worker.request(("check", prog, transform))[1]
    except Crash as c:
        return ("crash", c.detail, "", "", None, None)
    except FuzzerError as e:
        return ("fuzzer_error", str(e), "", "", None, None)


def _same(res, like):
    """Whether outcome `res` is the disagreement `like`: same class, same exception classes."""
    if res[0] != like[0]:
        return False
    if like[0] in ("kiln_raises", "exc_class") and res[4] != like[4]:
        return False
    return like[0] not in ("jax_raises", "exc_class") or res[5] == like[5]


def window(prog, values, i, j, transform=""):
    """Statements i..j of prog as a program of their own; None where an input was never computed
    or where `transform` differentiates and the window has nothing to differentiate."""
    stmts = prog.stmts[i:j + 1]
    defined = {s.out for s in stmts}
    needed = []
    for s in stmts:
        for a in s.args:
            if a not in defined and a not in needed:
                needed.append(a)
    if any(a not in values for a in needed):
        return None
    inputs = {a: np.asarray(values[a]) for a in needed}
    sub = Program(prog.seed, prog.x64, inputs, copy.deepcopy(stmts), stmts[-1].out)
    sub.in_axes = {a: prog.in_axes.get(a, 0) for a in needed}
    if needed and all(v is None for v in sub.in_axes.values()):
        sub.in_axes[needed[0]] = 0
    sub.batch = prog.batch
    sub.grad_args = [a for a in needed if is_inexact(_dtname(inputs[a]))]
    out = values.get(sub.out)
    if out is not None:
        sub.out_shape, sub.out_dtype = tuple(out.shape), _dtname(out)
    sub.transforms = list(prog.transforms)
    if "grad" in transform and (not sub.grad_args or (out is not None and not is_inexact(sub.out_dtype))):
        return None
    return sub


def _dtname(arr):
    return "bfloat16" if arr.dtype == np_dtype("bfloat16") else arr.dtype.name


def isolate(worker, prog, values, transform, like, hints=(), budget=10):
    """The smallest window of prog's statements that reproduces outcome `like` under transform:
    single statements first (hinted ops, then the last statement backwards), then longer
    windows. Returns (program, result) where result is the window's outcome, or (prog, None)
    when no window (but the whole program) reproduces."""
    n = len(prog.stmts)
    order = []
    for length in range(1, n):
        wins = [(i, i + length - 1) for i in range(n - length, -1, -1)]
        if length == 1:
            wins.sort(key=lambda w: prog.stmts[w[0]].op not in hints)
        order += wins
    tried = 0
    for i, j in order:
        if tried >= budget:
            break
        sub = window(prog, values, i, j, transform)
        if sub is None:
            continue
        tried += 1
        res = outcome(worker, sub, transform)
        if _same(res, like):
            return sub, res
    return prog, None


def _with_inputs(prog, inputs):
    p = copy.copy(prog)
    p.inputs = inputs
    return p


def shrink_inputs(worker, prog, transform, like, budget=16):
    """Smaller shapes (all axes of one size together, then each axis), then rounder values,
    while the disagreement stays. Returns (program, result of its last successful check)."""
    best, best_res, tried = prog, None, 0

    def attempt(inputs):
        nonlocal best, best_res, tried
        if tried >= budget:
            return False
        tried += 1
        cand = _with_inputs(best, inputs)
        if "grad" in transform:     # the cotangent pattern follows the output's new shape
            try:
                out = worker.request(("values", cand))[1].get(cand.out)
            except (Crash, FuzzerError):
                out = None
            if out is not None:
                cand.out_shape = tuple(out.shape)
        res = outcome(worker, cand, transform)
        if _same(res, like):
            best, best_res = cand, res
            return True
        return False

    sizes = sorted({d for v in prog.inputs.values() for d in v.shape if d > 2}, reverse=True)
    for s in sizes:
        for k in (1, 2):
            inputs = {n: _cut_size(v, s, k) for n, v in best.inputs.items()}
            if attempt(inputs):
                break
    for name in list(best.inputs):
        for ax in range(best.inputs[name].ndim):
            for k in (1, 2):
                v = best.inputs[name]
                if v.shape[ax] > k:
                    inputs = dict(best.inputs)
                    inputs[name] = np.take(v, range(k), axis=ax)
                    if attempt(inputs):
                        break
    rounded = {n: _round(v) for n, v in best.inputs.items()}
    if any(not _same_bits(rounded[n], best.inputs[n]) for n in rounded):
        attempt(rounded)
    return best, best_res


def _cut_size(v, size, k):
    for ax, d in enumerate(v.shape):
        if d == size:
            v = np.take(v, range(k), axis=ax)
    return v


def _round(v):
    if v.dtype.kind == "f" or v.dtype == np_dtype("bfloat16"):
        r = np.round(v.astype(np.float64), 1)
        return np.where(np.isfinite(r), r, v.astype(np.float64)).astype(v.dtype)
    if v.dtype.kind == "c":
        out = np.empty_like(v)
        out.real, out.imag = np.round(v.real, 1), np.round(v.imag, 1)
        return out
    return v


def _same_bits(a, b):
    return a.shape == b.shape and a.tobytes() == b.tobytes()
