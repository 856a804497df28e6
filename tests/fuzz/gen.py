"""Random program generation: a context that picks operands (earlier variables, fresh random
inputs, Python-scalar literals) for the rows of ops.py and evaluates each new statement eagerly in
JAX to learn its shape, dtype and weak type. Runs only inside a worker (it imports JAX)."""
import math
import warnings
from dataclasses import dataclass

import numpy as np

from .program import (COMPLEX, INEXACT, INT, UINT, Program, Stmt, canonical,
                      is_inexact, np_dtype)


@dataclass
class Var:
    name: str
    shape: tuple
    dtype: str          # as JAX sees it (canonical)
    weak: bool
    exact: bool         # bit-identical in both libraries (no inexact float arithmetic upstream)
    kind: str = "normal"   # value property of a fresh input: normal, special, nonzero, index, ...

    @property
    def rank(self):
        return len(self.shape)

    @property
    def size(self):
        return math.prod(self.shape)


class Reject(Exception):
    """A row cannot build a statement from this context (it is skipped, another row is drawn)."""


_BIG_FLOAT = {"float16": 6e4, "bfloat16": 3e38, "float32": 3e38, "float64": 1e300}


def random_values(rng, shape, dtype, kind="normal", bound=None):
    """Fresh input values: never all zeros; `kind` asks for a property (special values, nonzero
    divisors, in-range or out-of-range indices, small exponents, big integers)."""
    dt = np_dtype(dtype)
    n = math.prod(shape)
    if dtype == "bool":
        v = rng.random(shape) < 0.5
        if n and not v.any():
            v.reshape(-1)[0] = True
        return np.asarray(v, dtype=bool)
    if dtype in INT:
        info = np.iinfo(dt)
        unsigned = dtype in UINT
        if kind == "index":
            lo, hi = (0 if unsigned else -bound), bound
            v = rng.integers(lo, max(hi, lo + 1), size=shape)
        elif kind == "oob_index":
            v = rng.integers(0 if unsigned else -bound - 2, bound + 3, size=shape)
        elif kind == "nonzero":
            v = rng.integers(1, 6, size=shape) * (1 if unsigned else rng.choice([-1, 1], size=shape))
        elif kind == "small_nonneg":
            v = rng.integers(0, 4, size=shape)
        elif kind == "shift":
            v = rng.integers(0, info.bits + 1, size=shape)
        elif kind == "big":
            pool = np.array([info.min, info.max, info.min + 1, info.max - 1, 0, 1], dtype=object)
            v = rng.integers(info.min, info.max, size=shape, endpoint=True, dtype=dt)
            mask = rng.random(shape) < 0.5
            v = np.where(mask, np.array(rng.choice(pool, size=shape), dtype=dt), v)
        else:
            v = rng.integers(0, 10, size=shape) if unsigned else rng.integers(-5, 6, size=shape)
        v = np.asarray(v).astype(dt)
        if n and not v.any() and kind not in ("index", "oob_index", "small_nonneg", "shift"):
            v.reshape(-1)[0] = 1
        return v
    real = "float32" if dtype == "complex64" else "float64" if dtype == "complex128" else dtype
    def draw():
        if kind == "positive":
            x = np.abs(rng.standard_normal(shape)) * 2 + 0.1
        elif kind == "unit":
            x = rng.uniform(-0.95, 0.95, size=shape)
        elif kind == "smallint":
            x = rng.integers(-4, 5, size=shape).astype(np.float64)
        else:
            x = rng.standard_normal(shape) * rng.choice([1.0, 3.0])
        if kind == "special":
            # no subnormals: XLA's CPU runtime flushes them to zero, kiln does not (TRIAGE.md)
            pool = np.array([np.nan, np.inf, -np.inf, -0.0, 0.0, _BIG_FLOAT[real], -2.5])
            mask = rng.random(shape) < 0.35
            x = np.where(mask, rng.choice(pool, size=shape), x)
        return x
    if dtype in COMPLEX:
        v = np.empty(shape, dtype=dt)
        v.real, v.imag = draw(), draw()
    else:
        v = np.asarray(draw()).astype(dt)
    if n and not np.any(v != 0) and kind != "special":
        v.reshape(-1)[0] = 1
    return np.asarray(v, dtype=dt)


class Ctx:
    """Generation state of one program: variables (with JAX values), inputs, statements."""

    def __init__(self, seed, x64, jax):
        self.seed = seed
        self.rng = np.random.default_rng(seed)
        self.x64 = x64
        self.jax = jax
        self.vars = []
        self.values = {}
        self.inputs = {}
        self.stmts = []
        self.pending = []     # inputs created by the row being built (dropped if it is rejected)
        self._n = 0

    # --- random helpers -------------------------------------------------------------------------
    def chance(self, p):
        return self.rng.random() < p

    def choice(self, seq):
        seq = list(seq)
        return seq[int(self.rng.integers(len(seq)))]

    def canon(self, dtype):
        return canonical(dtype, self.x64)

    def dims(self, rank):
        out = []
        for _ in range(rank):
            r = self.rng.random()
            out.append(0 if r < 0.015 else 1 if r < 0.2 else int(self.rng.integers(2, 5)) if r < 0.93
                       else int(self.rng.integers(5, 8)))
        return tuple(out)

    def shape(self, min_rank=0, max_rank=3):
        ranks = [r for r in range(min_rank, max_rank + 1)]
        weights = np.array([{0: 0.5, 1: 1.4, 2: 1.4, 3: 0.8}.get(r, 0.3) for r in ranks])
        rank = int(self.rng.choice(ranks, p=weights / weights.sum()))
        return self.dims(rank)

    # --- variables --------------------------------------------------------------------------------
    def _name(self, prefix):
        self._n += 1
        return f"{prefix}{self._n - 1}"

    def new_input(self, shape, dtype, kind=None, bound=None):
        """A fresh random input (argument of the program)."""
        if kind is None:
            kind = "special" if dtype in INEXACT and self.chance(0.15) else \
                   "big" if dtype in INT and self.chance(0.06) else "normal"
        value = random_values(self.rng, tuple(shape), dtype, kind, bound)
        name = self._name("x")
        v = Var(name, tuple(shape), self.canon(dtype), False, True, kind)
        self.pending.append((v, value))
        return v

    def pick(self, dtypes, exact=False, min_rank=0, max_rank=3, fresh=0.3, min_size=0,
             shape=None, kind=None):
        """An operand of one of `dtypes`: usually the newest matching variable (programs chain),
        sometimes an older one or a fresh input. `exact` excludes variables that went through
        inexact float arithmetic (for ops whose result jumps at a threshold)."""
        cands = [v for v in self.vars + [p[0] for p in self.pending]
                 if v.dtype in {self.canon(d) for d in dtypes}
                 and min_rank <= v.rank <= max_rank and v.size >= min_size
                 and (not exact or v.exact or not is_inexact(v.dtype))
                 and (shape is None or v.shape == tuple(shape))
                 and (kind is None or v.kind == kind)]
        if cands and not self.chance(fresh):
            return cands[-1] if self.chance(0.6) else self.choice(cands)
        if shape is None:
            for _ in range(20):
                shape = self.shape(min_rank, max_rank)
                if math.prod(shape) >= min_size:
                    break
            else:
                raise Reject("no shape")
        return self.new_input(shape, self.choice(dtypes), kind)

    def literal(self, dtype):
        """A Python-scalar operand (weakly typed) of dtype's kind, as source text."""
        if dtype == "bool":
            return self.choice(["True", "False"])
        if dtype in INT:
            if self.chance(0.03):
                return self.choice(["300", "70000", "-129", "2**33"])
            return self.choice(["0", "1", "2", "3", "-1", "-3", "5", "7"] if dtype not in UINT
                               else ["0", "1", "2", "3", "5", "7"])
        if dtype in COMPLEX:
            return self.choice(["(1+2j)", "(-0.5+0.25j)", "1j", "(2-1j)"])
        if self.chance(0.04):
            return self.choice(['float("nan")', 'float("inf")', "-float('inf')", "1e40"])
        return self.choice(["0.5", "-1.5", "2.0", "3.25", "0.001", "-0.0", "10.0", "1e6", "1.0"])

    def partner(self, x, dtypes, exact=False, kind=None, literal_p=0.25, shape_mode=None):
        """A second operand for `x` that broadcasts with it: a literal, an existing variable, or a
        fresh input of a broadcast-compatible shape. Returns (text, Var or None)."""
        if self.chance(literal_p) and kind in (None, "normal"):
            return self.literal(self.choice(dtypes)), None
        if kind is None and self.chance(0.35):
            cands = [v for v in self.vars if v is not x and v.dtype in {self.canon(d) for d in dtypes}
                     and (not exact or v.exact or not is_inexact(v.dtype)) and _broadcasts(v.shape, x.shape)]
            if cands:
                v = self.choice(cands)
                return v.name, v
        mode = shape_mode or self.choice(["same", "same", "same", "suffix", "ones", "scalar", "lead"])
        s = list(x.shape)
        if mode == "suffix":
            s = s[int(self.rng.integers(0, len(s) + 1)):]
        elif mode == "ones":
            s = [1 if self.chance(0.5) else d for d in s]
        elif mode == "scalar":
            s = []
        elif mode == "lead" and len(s) < 3:
            s = [int(self.rng.integers(1, 4))] + s
        v = self.new_input(tuple(s), self.choice(dtypes), kind)
        return v.name, v

    # --- statements ------------------------------------------------------------------------------
    def jax_eval(self, expr):
        jax = self.jax
        ns = {"jnp": jax.numpy, "lax": jax.lax, "jax": jax, "np": np}
        ns.update(self.values)
        for v, value in self.pending:
            ns[v.name] = jax.numpy.asarray(value)
        with warnings.catch_warnings():
            warnings.simplefilter("ignore")
            return eval(expr, ns)

    def value_of(self, var):
        for v, value in self.pending:
            if v.name == var.name:
                return value
        return np.asarray(self.values[var.name])

    def finite(self, var):
        return bool(np.all(np.isfinite(np.asarray(self.value_of(var)).astype(np.complex128))))

    def has_int_min(self, var):
        if var.dtype not in INT or var.dtype in UINT:
            return False
        return bool(np.any(np.asarray(self.value_of(var)) == np.iinfo(np_dtype(var.dtype)).min))

    def duplicate_targets(self, dims, ivars):
        """Whether index arrays `ivars` (over axes of sizes `dims`) name one element twice."""
        try:
            arrs = np.broadcast_arrays(*[np.asarray(self.value_of(v)).astype(np.int64) for v in ivars])
        except ValueError:
            return False
        keys = [tuple(int(a.reshape(-1)[k]) % max(d, 1) for a, d in zip(arrs, dims))
                for k in range(arrs[0].size)]
        return len(set(keys)) < len(keys)

    def shape_of(self, expr):
        """The shape JAX gives `expr` (used by rows that size an operand after an indexing)."""
        try:
            return tuple(self.jax_eval(expr).shape)
        except Exception as e:
            raise Reject(str(e)) from None

    def add(self, row, expr, args, op=None):
        """Evaluates the statement in JAX; commits it (and its fresh inputs) when it computes, or,
        sometimes, when it raises (an error program, ended there). Returns the new Var or None."""
        jax = self.jax
        try:
            value = self.jax_eval(expr)
            err = None
        except Exception as e:  # noqa: BLE001 -- any JAX error is a candidate error program
            value, err = None, e
        if err is None and not isinstance(value, jax.Array):
            raise Reject("not an array")
        if err is not None and not self.chance(0.2):
            raise Reject("jax raises")
        for v, val in self.pending:
            self.vars.append(v)
            self.inputs[v.name] = val
            self.values[v.name] = jax.numpy.asarray(val)
        self.pending = []
        name = self._name("v")
        kind = row.kind
        self.stmts.append(Stmt(name, op or row.name, expr, [a.name for a in args], kind))
        if err is not None:
            return None
        exact = all(a.exact or not is_inexact(a.dtype) for a in args)
        if kind in ("arith", "domain") and is_inexact(str(value.dtype)):
            exact = False
        self.stmts[-1].dtype = str(value.dtype)
        v = Var(name, tuple(value.shape), str(value.dtype), bool(value.weak_type), exact)
        self.vars.append(v)
        self.values[name] = value
        return v


def _broadcasts(a, b):
    try:
        np.broadcast_shapes(a, b)
        return True
    except ValueError:
        return False


TRANSFORMS_PLAIN = ["eager", "jit"]
TRANSFORMS_GRAD = ["grad", "jit(grad)", "grad(jit)", "vmap(grad)", "jit(vmap(grad))"]
TRANSFORMS_VMAP = ["vmap", "jit(vmap)", "vmap(jit)"]


def generate(seed, x64, jax, rows, max_stmts=4, extra_transforms=2):
    """Program number `seed`: 1..max_stmts statements drawn from `rows` (by weight)."""
    ctx = Ctx(seed, x64, jax)
    weights = np.array([r.weight for r in rows], dtype=float)
    weights /= weights.sum()
    n = int(ctx.rng.integers(1, max_stmts + 1))
    tries = 0
    while len(ctx.stmts) < n and tries < 60:
        tries += 1
        row = rows[int(ctx.rng.choice(len(rows), p=weights))]
        ctx.pending = []
        try:
            built = row.build(ctx, row)
            v = ctx.add(row, *built)
        except Reject:
            ctx.pending = []
            continue
        if v is None:     # JAX raised: the program ends with its error
            break
    if not ctx.stmts:
        raise Reject("empty program")
    last = ctx.stmts[-1].out
    outvar = next((v for v in ctx.vars if v.name == last), None)
    prog = Program(seed, x64, dict(ctx.inputs), ctx.stmts, last)
    names = list(prog.inputs)
    # vmap: each input batched along 0 (sometimes its last axis, sometimes not at all)
    for nm in names:
        r = ctx.rng.random()
        prog.in_axes[nm] = None if r < 0.25 else (-1 if r < 0.35 else 0)
    if names and all(a is None for a in prog.in_axes.values()):
        prog.in_axes[names[0]] = 0
    prog.batch = int(ctx.choice([1, 2, 3, 3]))
    prog.grad_args = [nm for nm in names if is_inexact(ctx.canon(prog.inputs[nm].dtype.name
                      if prog.inputs[nm].dtype.name != "bfloat16" else "bfloat16"))]
    transforms = list(TRANSFORMS_PLAIN)
    extra = list(TRANSFORMS_VMAP) if names else []
    if outvar is not None:
        prog.out_shape, prog.out_dtype = outvar.shape, outvar.dtype
        if is_inexact(outvar.dtype) and prog.grad_args:
            extra += TRANSFORMS_GRAD
            if not names or not any(a is not None for a in prog.in_axes.values()):
                extra = [t for t in extra if "vmap" not in t]
    else:
        extra += ["grad"] if prog.grad_args else []
    ctx.rng.shuffle(extra)
    transforms += extra[:extra_transforms]
    prog.transforms = transforms
    return prog
