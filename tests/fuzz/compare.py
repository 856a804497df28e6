"""Running one program under one transformation in JAX and in kiln (same process), and classifying
how the two results disagree. Imported only by the worker (it imports both libraries)."""
import warnings
from dataclasses import dataclass

import numpy as np

from .program import COMPLEX, FLOAT, np_dtype

CLASSES = ["wrong_value", "wrong_dtype", "wrong_shape", "wrong_weak_type", "kiln_raises",
           "jax_raises", "exc_class", "crash"]

# relative tolerance for one inexact statement; scaled by the program's count of them
BASE_TOL = {"float16": 4e-3, "bfloat16": 3e-2, "float32": 3e-6, "float64": 1e-13,
            "complex64": 3e-6, "complex128": 1e-13}


@dataclass
class Outcome:
    """One library's result: leaves (arrays as NumPy, dtype names, weak types) or an exception."""
    leaves: list = None     # [(np.ndarray, dtype str, weak bool or None)]
    exc: str = None         # exception class name
    mro: tuple = ()         # class names of the exception's MRO
    msg: str = ""

    def summary(self):
        if self.exc:
            return f"raises {self.exc}: {self.msg[:300]}"
        parts = []
        for arr, dt, weak in self.leaves:
            w = " weak" if weak else ""
            body = np.array2string(np.asarray(arr).astype(np.float64) if dt == "bfloat16" else arr,
                                   threshold=24, max_line_width=200)
            parts.append(f"{dt}{list(arr.shape)}{w} {body}")
        return "; ".join(parts)


_LIBS = {}


def library(name):
    """Namespace the program text runs in: jax/jnp/lax bound to JAX or to kiln."""
    if name not in _LIBS:
        if name == "jax":
            import jax
            import jax.lax as lax
            import jax.numpy as jnp
        else:
            import kiln as jax
            import kiln.lax as lax
            import kiln.numpy as jnp
        _LIBS[name] = {"jax": jax, "jnp": jnp, "lax": lax, "np": np}
    return _LIBS[name]


def set_x64(on):
    for name in ("jax", "kiln"):
        library(name)["jax"].config.update("jax_enable_x64", bool(on))


def _flatten(out):
    if isinstance(out, (tuple, list)):
        return [leaf for o in out for leaf in _flatten(o)]
    if isinstance(out, dict):
        return [leaf for k in sorted(out) for leaf in _flatten(out[k])]
    return [out]


def build(prog, transform, ns):
    """The callable and its arguments for `transform` ('eager', 'jit', 'grad', 'vmap', and
    compositions such as 'jit(vmap(grad))'), in namespace `ns`."""
    jax, jnp = ns["jax"], ns["jnp"]
    env = dict(ns)
    exec(prog.source("f"), env)  # noqa: S102 -- generated program text
    f = env["f"]
    names = prog.arg_names()
    args = list(prog.inputs.values())
    chain = transform.replace(")", "").split("(")
    if chain == ["eager"]:
        # eager ops see library arrays (two NumPy operands would compute in NumPy)
        return f, [jnp.asarray(a) for a in args]
    fn = f
    if "vmap" in chain:
        # vmap passes unbatched arguments through untouched: make them library arrays, or JAX's
        # function would see NumPy arrays (no .at, NumPy's astype) where kiln's sees its own
        args = [a if prog.in_axes.get(n) is not None else jnp.asarray(a)
                for n, a in zip(names, prog.batched_inputs())]
    argnums = tuple(names.index(n) for n in prog.grad_args)
    w = prog.grad_weights() if "grad" in chain else None
    for step in reversed(chain):
        if step == "jit":
            fn = jax.jit(fn)
        elif step == "vmap":
            fn = jax.vmap(fn, in_axes=tuple(prog.in_axes.get(n) for n in names))
        elif step == "grad":
            inner = fn
            fn = jax.grad(lambda *a, _g=inner: jnp.sum(jnp.real(_g(*a) * w)), argnums=argnums)
        else:
            raise ValueError(f"unknown transformation {transform!r}")
    return fn, args


def run(prog, transform, lib):
    ns = library(lib)
    try:
        with warnings.catch_warnings():
            warnings.simplefilter("ignore")
            fn, args = build(prog, transform, ns)
            out = fn(*args)
            leaves = []
            for leaf in _flatten(out):
                arr = np.asarray(leaf)
                leaves.append((arr, str(getattr(leaf, "dtype", arr.dtype)), getattr(leaf, "weak_type", None)))
        return Outcome(leaves=leaves)
    except Exception as e:  # noqa: BLE001 -- every exception is a result to compare
        return Outcome(exc=type(e).__name__, mro=tuple(c.__name__ for c in type(e).__mro__), msg=str(e))


def _tol(dtype, prog, transform):
    # the least precise float the program computes in bounds the result's accuracy
    base = max([BASE_TOL.get(dtype, 1e-6)] + [BASE_TOL[d] for d in prog.dtypes() if d in BASE_TOL])
    scale = 1 + 2 * prog.n_arith()
    if "grad" in transform:
        scale *= 4
    return base * scale


def _bad_real(a, b, rtol):
    """Elementwise disagreement of float arrays (b is JAX's): NaN positions differ, infinities
    differ, or finite values further apart than rtol (plus rtol times the reference's largest
    magnitude, which absorbs cancellation in sums)."""
    na, nb = np.isnan(a), np.isnan(b)
    ia, ib = np.isinf(a), np.isinf(b)
    bad = (na != nb) | (ia != ib) | (ia & ib & (a != b))
    fin = ~(na | nb | ia | ib)
    if fin.any():
        scale = max(1.0, float(np.max(np.abs(b[fin]))))
        with np.errstate(invalid="ignore", over="ignore"):
            far = np.abs(a - b) > rtol * np.abs(b) + rtol * scale
        bad |= fin & far
    return bad


def mismatches(ja, ka, dtype, rtol):
    """Boolean mask of the elements where kiln's `ka` disagrees with JAX's `ja`."""
    if dtype in FLOAT:
        return _bad_real(ka.astype(np.float64), ja.astype(np.float64), rtol)
    if dtype in COMPLEX:
        j, k = ja.astype(np.complex128), ka.astype(np.complex128)
        jn = np.isnan(j.real) | np.isnan(j.imag)
        kn = np.isnan(k.real) | np.isnan(k.imag)
        both = ~(jn | kn)
        real = _bad_real(np.where(both, k.real, 0), np.where(both, j.real, 0), rtol)
        imag = _bad_real(np.where(both, k.imag, 0), np.where(both, j.imag, 0), rtol)
        return (jn != kn) | (both & (real | imag))
    return ja != (ka.astype(ja.dtype) if ja.dtype != ka.dtype else ka)


def values_agree(ja, ka, dtype, rtol):
    return ja.shape == ka.shape and not np.any(mismatches(ja, ka, dtype, rtol))


def classify(prog, transform, j, k):
    """(class or 'ok', detail) for JAX's outcome `j` and kiln's `k`."""
    if j.exc and k.exc:
        if j.exc in k.mro:
            return "ok", ""
        return "exc_class", f"JAX raises {j.exc}, kiln raises {k.exc}"
    if j.exc:
        return "kiln_computes", ""  # renamed below
    if k.exc:
        return "kiln_raises", f"JAX computes, kiln raises {k.exc}: {k.msg[:200]}"
    if len(j.leaves) != len(k.leaves):
        return "wrong_shape", f"{len(j.leaves)} results vs {len(k.leaves)}"
    for (ja, jd, _), (ka, kd, _) in zip(j.leaves, k.leaves):
        if ja.shape != ka.shape:
            return "wrong_shape", f"JAX {list(ja.shape)}, kiln {list(ka.shape)}"
    for (ja, jd, _), (ka, kd, _) in zip(j.leaves, k.leaves):
        if jd != kd:
            return "wrong_dtype", f"JAX {jd}, kiln {kd}"
    for n, ((ja, jd, _), (ka, kd, _)) in enumerate(zip(j.leaves, k.leaves)):
        bad = mismatches(ja, ka, jd, _tol(jd, prog, transform))
        if np.any(bad):
            first = tuple(int(i) for i in np.argwhere(bad)[0]) if bad.ndim else ()
            leaf = f"result {n}, " if len(j.leaves) > 1 else ""
            return "wrong_value", (f"{leaf}{int(np.sum(bad))} of {bad.size} elements differ; at {list(first)}: "
                                   f"JAX {ja[first]!r}, kiln {ka[first]!r}")
    for (ja, jd, jw), (ka, kd, kw) in zip(j.leaves, k.leaves):
        if jw is not None and bool(jw) != bool(kw):
            return "wrong_weak_type", f"JAX weak_type={jw}, kiln weak_type={kw}"
    return "ok", ""


def check(prog, transform):
    """Runs both libraries: (class, detail, JAX's result, kiln's result, kiln's exception class,
    JAX's exception class)."""
    set_x64(prog.x64)
    j = run(prog, transform, "jax")
    k = run(prog, transform, "kiln")
    cls, detail = classify(prog, transform, j, k)
    if cls == "kiln_computes":
        cls, detail = "jax_raises", f"JAX raises {j.exc}: {j.msg[:200]}; kiln computes"
    if cls == "ok":
        return cls, "", "", "", None, None
    return cls, detail, j.summary(), k.summary(), k.exc, j.exc


def jax_values(prog):
    """Every variable's value when JAX runs the program eagerly (inputs unbatched), as NumPy;
    used to cut a window of statements out of a program with its inputs made literal."""
    set_x64(prog.x64)
    ns = dict(library("jax"))
    env = dict(ns)
    env.update({n: ns["jnp"].asarray(v) for n, v in prog.inputs.items()})
    vals = dict(prog.inputs)
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        for s in prog.stmts:
            try:
                v = eval(s.expr, env)  # noqa: S307 -- generated program text
            except Exception:  # noqa: BLE001
                break
            env[s.out] = v
            arr = np.asarray(v)
            if str(v.dtype) == "bfloat16":
                arr = arr.astype(np_dtype("bfloat16"))
            vals[s.out] = arr
    return vals
