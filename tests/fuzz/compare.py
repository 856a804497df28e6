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
        args = prog.batched_inputs()
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
    base = BASE_TOL.get(dtype, 1e-6)
    scale = 1 + 2 * prog.n_arith()
    if "grad" in transform:
        scale *= 4
    return base * scale


def _close_real(a, b, rtol):
    """NaN positions equal, infinities equal, finite values within rtol (plus rtol times the
    reference's largest magnitude, which absorbs cancellation in sums)."""
    na, nb = np.isnan(a), np.isnan(b)
    if not np.array_equal(na, nb):
        return False
    ia, ib = np.isinf(a), np.isinf(b)
    if not np.array_equal(ia, ib) or not np.array_equal(a[ia], b[ib]):
        return False
    fin = ~(nb | ib)
    if not fin.any():
        return True
    af, bf = a[fin], b[fin]
    scale = max(1.0, float(np.max(np.abs(bf))))
    return bool(np.all(np.abs(af - bf) <= rtol * np.abs(bf) + rtol * scale))


def values_agree(ja, ka, dtype, rtol):
    if ja.shape != ka.shape:
        return False
    if dtype in FLOAT:
        return _close_real(ja.astype(np.float64), ka.astype(np.float64), rtol)
    if dtype in COMPLEX:
        j, k = ja.astype(np.complex128), ka.astype(np.complex128)
        jn = np.isnan(j.real) | np.isnan(j.imag)
        kn = np.isnan(k.real) | np.isnan(k.imag)
        if not np.array_equal(jn, kn):
            return False
        ok = ~jn
        return _close_real(j.real[ok], k.real[ok], rtol) and _close_real(j.imag[ok], k.imag[ok], rtol)
    return np.array_equal(ja, ka.astype(ja.dtype) if ja.dtype != ka.dtype else ka)


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
    for (ja, jd, _), (ka, kd, _) in zip(j.leaves, k.leaves):
        if not values_agree(ja, ka, jd, _tol(jd, prog, transform)):
            return "wrong_value", ""
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
