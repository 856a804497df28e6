"""The fuzzer's program model: literal NumPy inputs, a list of statements (Python expressions over
`jnp`, `lax`, `jax`), one output; rendered as the text both libraries run. Depends on NumPy and
ml_dtypes only (the orchestrating process never imports kiln or JAX)."""
import math
from dataclasses import dataclass, field

import ml_dtypes
import numpy as np

BOOL = ("bool",)
SINT = ("int8", "int16", "int32", "int64")
UINT = ("uint8", "uint16", "uint32", "uint64")
INT = SINT + UINT
FLOAT = ("float16", "bfloat16", "float32", "float64")
COMPLEX = ("complex64", "complex128")
INEXACT = FLOAT + COMPLEX
NUM = INT + INEXACT
ALL = BOOL + NUM

_NARROW = {"int64": "int32", "uint64": "uint32", "float64": "float32", "complex128": "complex64"}


def canonical(dtype, x64):
    """The dtype JAX gives an input of `dtype` (64-bit types narrow without x64)."""
    return dtype if x64 else _NARROW.get(dtype, dtype)


def np_dtype(name):
    return np.dtype(ml_dtypes.bfloat16) if name == "bfloat16" else np.dtype(name)


def is_inexact(dtype):
    return dtype in INEXACT


@dataclass
class Stmt:
    out: str      # the variable this statement binds
    op: str       # the table row's name (the defect signature's op)
    expr: str     # Python expression over jnp/lax/jax and earlier variables
    args: list    # the variables the expression reads
    kind: str = "arith"   # 'arith' (inexact result), 'keep' (exact in, exact out), 'disc'
    dtype: str = ""       # the result's dtype when generated (sets the comparison tolerance)


@dataclass
class Program:
    """A random program. `inputs` maps names to literal NumPy arrays (the same bits go to both
    libraries); `stmts` bind variables in order; `out` is returned."""
    seed: int
    x64: bool
    inputs: dict                       # name -> np.ndarray
    stmts: list
    out: str
    in_axes: dict = field(default_factory=dict)   # name -> batch axis or None (vmap)
    batch: int = 2
    grad_args: list = field(default_factory=list)  # inputs differentiated under grad
    out_shape: tuple = ()
    out_dtype: str = "float32"
    transforms: list = field(default_factory=list)

    def arg_names(self):
        return list(self.inputs)

    def source(self, name="f"):
        lines = [f"def {name}({', '.join(self.inputs)}):"]
        lines += [f"    {s.out} = {s.expr}" for s in self.stmts]
        lines.append(f"    return {self.out}")
        return "\n".join(lines)

    def dtypes(self):
        """Every dtype the program computes in: inputs, statements, output."""
        out = {canonical("bfloat16" if v.dtype == np_dtype("bfloat16") else v.dtype.name, self.x64)
               for v in self.inputs.values()}
        out |= {s.dtype for s in self.stmts if s.dtype}
        out.add(self.out_dtype)
        return out

    def n_arith(self):
        return sum(1 for s in self.stmts if s.kind == "arith")

    def ops(self):
        return [s.op for s in self.stmts]

    def batched_inputs(self):
        """vmap's arguments: each batched input stacks `batch` rolled copies of itself (the values
        keep their properties: index ranges, nonzero divisors, exactness)."""
        out = []
        for name, v in self.inputs.items():
            ax = self.in_axes.get(name)
            if ax is None:
                out.append(v)
                continue
            copies = [np.roll(v.reshape(-1), k).reshape(v.shape) for k in range(self.batch)]
            out.append(np.stack(copies, axis=ax))
        return out

    def grad_weights(self):
        """The fixed cotangent pattern of the scalar loss sum(out * w): 1, 1.25, 1.5, 1.75, ..."""
        n = math.prod(self.out_shape)
        w = 1 + (np.arange(n) % 4) * 0.25
        real = {"complex64": "float32", "complex128": "float64"}.get(self.out_dtype, self.out_dtype)
        if real not in FLOAT:
            real = "float32"
        return w.reshape(self.out_shape).astype(np_dtype(real))


def literal(arr):
    """Python source that rebuilds `arr` exactly (bits of NaN payloads aside)."""
    dt = arr.dtype
    name = "bfloat16" if dt == np_dtype("bfloat16") else dt.name
    dts = "ml_dtypes.bfloat16" if name == "bfloat16" else f"np.{name}"
    if arr.size == 0:
        return f"np.zeros({arr.shape}, dtype={dts})"
    if dt.kind == "f" or name == "bfloat16":
        body = _nested(arr, lambda v: _flt(v, dt))
    elif dt.kind == "c":
        body = _nested(arr, _cpx)
    elif dt.kind == "b":
        body = _nested(arr, lambda v: "True" if v else "False")
    else:
        body = _nested(arr, lambda v: str(int(v)))
    return f"np.array({body}, dtype={dts})"


def _flt(v, dt=None):
    """The shortest text that rounds back to v in its own dtype."""
    f = float(v)
    if math.isnan(f):  # the sign of a NaN shows through bitcasts and top_k's total order
        return "-nan" if math.copysign(1.0, f) < 0 else "nan"
    if math.isinf(f):
        return "inf" if f > 0 else "-inf"
    if dt is not None and dt != np.float64:
        s = str(dt.type(v))
        try:
            if dt.type(float(s)) == dt.type(v) and (f != 0 or s.startswith("-") == str(f).startswith("-")):
                return s
        except ValueError:
            pass
    return repr(f)


def _cpx(v):
    dt = np.dtype(np.float32) if v.dtype == np.complex64 else None
    return f"complex({_flt(v.real, dt)}, {_flt(v.imag, dt)})"


def _nested(arr, fmt):
    if arr.ndim == 0:
        return fmt(arr[()])
    return "[" + ", ".join(_nested(a, fmt) for a in arr) + "]"


TRANSFORM_TEXT = {
    "eager": "f(*map(jnp.asarray, args))",
    "jit": "jax.jit(f)(*args)",
    "grad": "jax.grad(loss, argnums)(*args)",
    "jit(grad)": "jax.jit(jax.grad(loss, argnums))(*args)",
    "grad(jit)": "jax.grad(loss_of_jit, argnums)(*args)",
    "vmap": "jax.vmap(f, in_axes)(*bargs)",
    "jit(vmap)": "jax.jit(jax.vmap(f, in_axes))(*bargs)",
    "vmap(jit)": "jax.vmap(jax.jit(f), in_axes)(*bargs)",
    "vmap(grad)": "jax.vmap(jax.grad(loss, argnums), in_axes)(*bargs)",
    "jit(vmap(grad))": "jax.jit(jax.vmap(jax.grad(loss, argnums), in_axes))(*bargs)",
}


def repro(prog, transform):
    """A standalone script: the inputs as literals, the program, the transformed call. It runs
    against JAX as written and against kiln with the import line swapped."""
    lines = ["import numpy as np, ml_dtypes",
             "from numpy import nan, inf",
             "import jax, jax.numpy as jnp, jax.lax as lax   # kiln: import kiln as jax, kiln.numpy as jnp, kiln.lax as lax",
             f"jax.config.update('jax_enable_x64', {prog.x64})"]
    names = list(prog.inputs)
    for n in names:
        lines.append(f"{n} = {literal(prog.inputs[n])}")
    lines.append(prog.source())
    lines.append(f"args = [{', '.join(names)}]")
    if "grad" in transform:
        w = prog.grad_weights()
        lines.append(f"w = {literal(w)}")
        lines.append("loss = lambda *a: jnp.sum(jnp.real(f(*a) * w))")
        if transform == "grad(jit)":
            lines.append("loss_of_jit = lambda *a: jnp.sum(jnp.real(jax.jit(f)(*a) * w))")
        lines.append(f"argnums = {tuple(names.index(n) for n in prog.grad_args)}")
    if "vmap" in transform:
        axes = tuple(prog.in_axes.get(n) for n in names)
        lines.append(f"in_axes = {axes}")
        lines.append(f"bargs = [jnp.asarray(a) if ax is None else np.stack([np.roll(a.reshape(-1), k).reshape(a.shape) "
                     f"for k in range({prog.batch})], axis=ax) for a, ax in zip(args, in_axes)]")
    lines.append(f"print({TRANSFORM_TEXT[transform]})")
    return "\n".join(lines)


def compact_repro(prog, transform):
    """The shortest form: literal inputs (vmap's already batched), then one call line, e.g.
    `jax.jit(jax.vmap(lambda x0: jnp.sort(x0), in_axes=(0,)))(x0)`. A longer program keeps its
    `def f`."""
    names = list(prog.inputs)
    chain = transform.replace(")", "").split("(")
    vals = dict(prog.inputs)
    if "vmap" in chain:
        vals = dict(zip(names, prog.batched_inputs()))
    def wrap(n):
        if chain == ["eager"] or ("vmap" in chain and prog.in_axes.get(n) is None):
            return f"jnp.asarray({literal(vals[n])})"
        return literal(vals[n])
    lines = [f"{n} = {wrap(n)}" for n in names]
    if prog.x64:
        lines.insert(0, "jax.config.update('jax_enable_x64', True)")
    params = ", ".join(names)
    if len(prog.stmts) == 1 and prog.stmts[0].out == prog.out:
        body = prog.stmts[0].expr
    else:
        lines.append(prog.source())
        body = f"f({params})"
    if chain == ["eager"]:
        lines.append(body)
        return "\n".join(lines)
    fn = f"lambda {params}: {body}"
    if "grad" in chain:
        lines.append(f"w = {literal(prog.grad_weights())}")
    real = "jnp.real({})" if prog.out_dtype in COMPLEX else "{}"
    for step in reversed(chain):
        if step == "grad":
            argnums = tuple(names.index(n) for n in prog.grad_args)
            fn = f"jax.grad(lambda {params}: jnp.sum({real.format(f'({body}) * w')}), argnums={argnums})" \
                if fn.startswith("lambda") else \
                f"jax.grad(lambda *a: jnp.sum({real.format(f'{fn}(*a) * w')}), argnums={argnums})"
        elif step == "jit":
            fn = f"jax.jit({fn})"
        elif step == "vmap":
            fn = f"jax.vmap({fn}, in_axes={tuple(prog.in_axes.get(n) for n in names)})"
    lines.append(f"{fn}({params})")
    return "\n".join(lines)
