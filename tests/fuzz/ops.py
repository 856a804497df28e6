"""The op table: one row per jnp/lax operation the fuzzer draws, with its name (the defect
signature's op), the dtypes it is usually given, how exact its result is, a weight, and a builder
that picks operands and parameters through gen.Ctx. Adding an op is adding a row.

Result kinds: 'arith' (float results may differ by ulps between libraries), 'keep' (moves or
selects values: exact inputs give exact outputs), 'disc' (the result jumps at a threshold:
floor, comparisons, argmax, float->int; such a row only reads exact operands, so ulp-level
differences upstream never reach it), 'domain' (reads exact operands like 'disc' because NaN
appears past a boundary, e.g. sqrt, log, pow, arctan2's branch cut, float x//y, but its float
result is inexact)."""

from .gen import Reject
from .program import ALL, BOOL, COMPLEX, FLOAT, INEXACT, INT, NUM, SINT, UINT, is_inexact

REAL = INT + FLOAT
OFF_TABLE = 0.04      # chance a row is given any dtype (checks that both libraries reject alike)


class Row:
    def __init__(self, name, build, dtypes=ALL, kind="arith", weight=1.0, fmt=None, **params):
        self.name, self.build, self.dtypes, self.kind = name, build, dtypes, kind
        self.weight, self.fmt, self.p = weight, fmt, params

    def dts(self, g):
        return ALL if g.chance(OFF_TABLE) else self.dtypes

    @property
    def disc(self):
        """Reads only exact operands ('disc' and 'domain' rows)."""
        return self.kind in ("disc", "domain")

    def __repr__(self):
        return f"Row({self.name})"


def _dt(name):
    return "jnp.bool_" if name == "bool" else f"jnp.{name}"


def _kw(**kw):
    return "".join(f", {k}={v!r}" if not isinstance(v, _Raw) else f", {k}={v}"
                   for k, v in kw.items() if v is not _SKIP)


class _Raw(str):
    pass


_SKIP = object()


def _axis(g, rank, none_p=0.25, tuple_p=0.2):
    if rank == 0 or g.chance(none_p):
        return None if rank == 0 or g.chance(0.8) else (_SKIP if g.chance(0.5) else None)
    if rank > 1 and g.chance(tuple_p):
        k = int(g.rng.integers(1, rank + 1))
        axes = sorted(g.rng.choice(rank, size=k, replace=False).tolist())
        return tuple(a - rank if g.chance(0.3) else a for a in axes)
    a = int(g.rng.integers(0, rank))
    return a - rank if g.chance(0.3) else a


# ---- builders -------------------------------------------------------------------------------------

def b_unary(g, r):
    x = g.pick(r.dts(g), exact=r.disc or r.p.get("exact_in", False), kind=r.p.get("xkind"))
    return r.fmt.format(x=x.name), [x]


def b_binary(g, r):
    dts = r.dts(g)
    x = g.pick(dts, exact=r.disc)
    if r.p.get("ykind") == "nonzero" and g.has_int_min(x):
        raise Reject("INT_MIN // -1 is implementation-defined")
    y, yv = g.partner(x, r.p.get("ydtypes", dts), exact=r.disc, kind=r.p.get("ykind"))
    a, b = x.name, y
    if r.p.get("swap", True) and g.chance(0.3) and r.p.get("ykind") is None:
        a, b = b, a
    return r.fmt.format(a=a, b=b), [x] + ([yv] if yv else [])


def b_lax_binary(g, r):
    """lax binaries take equal shapes and dtypes (or a Python scalar)."""
    dts = r.dts(g)
    x = g.pick(dts, exact=r.disc)
    kind = r.p.get("ykind")
    if kind == "nonzero" and g.has_int_min(x):
        raise Reject("INT_MIN // -1 is implementation-defined")
    if g.chance(0.2) and kind is None:
        return r.fmt.format(a=x.name, b=g.literal(x.dtype)), [x]
    y = g.pick([x.dtype], exact=r.disc, shape=x.shape, kind=kind, fresh=0.6 if kind is None else 1.0)
    return r.fmt.format(a=x.name, b=y.name), [x, y]


def b_where(g, r):
    c = g.pick(BOOL)
    x, xv = g.partner(c, r.dts(g), literal_p=0.2)
    y, yv = g.partner(c, r.dts(g), literal_p=0.3)
    return f"jnp.where({c.name}, {x}, {y})", [c] + [v for v in (xv, yv) if v]


def b_select(g, r):
    x = g.pick(r.dts(g))
    c = g.pick(BOOL, shape=x.shape, fresh=0.5)
    y = g.pick([x.dtype], shape=x.shape, fresh=0.6)
    if g.chance(0.3):
        n = g.new_input((), "int32", "small_nonneg")
        z = g.pick([x.dtype], shape=x.shape, fresh=0.8)
        return f"lax.select_n(jnp.minimum({n.name}, 2), {x.name}, {y.name}, {z.name})", [n, x, y, z]
    return f"lax.select({c.name}, {x.name}, {y.name})", [c, x, y]


def b_clip(g, r):
    x = g.pick(r.dts(g))
    lo = g.literal(x.dtype) if g.chance(0.7) else "None"
    hi = g.literal(x.dtype) if g.chance(0.7) else "None"
    args = [x]
    if g.chance(0.25):
        lo, lv = g.partner(x, [x.dtype], literal_p=0)
        args.append(lv)
    if r.name == "lax.clamp":
        lo = lo if lo != "None" else g.literal(x.dtype)
        hi = hi if hi != "None" else g.literal(x.dtype)
        if args[1:] and args[1].shape not in ((), x.shape):
            raise Reject("clamp bound shape")
        return f"lax.clamp({lo}, {x.name}, {hi})", args
    return f"jnp.clip({x.name}, {lo}, {hi})", args


def _acc_dtype(g, x, choices):
    """A dtype= for a reduction; never float -> int (that conversion is a threshold op)."""
    if is_inexact(x.dtype):
        choices = [d for d in choices if d not in INT + BOOL] or ["float32"]
    return g.choice(choices)


def b_reduce(g, r):
    x = g.pick(r.dts(g), exact=r.disc, min_size=1 if g.chance(0.97) else 0)
    if r.fmt.startswith("lax."):
        axes = tuple(sorted(int(a) for a in g.rng.choice(x.rank, size=int(g.rng.integers(0, x.rank + 1)),
                                                         replace=False))) if x.rank else ()
        return f"{r.fmt}({x.name}, {axes})", [x]
    kw = {"axis": _axis(g, x.rank, tuple_p=0.2 if r.p.get("tuples", True) else 0)}
    if r.p.get("keepdims", True) and g.chance(0.3):
        kw["keepdims"] = True
    if r.p.get("dtype_kw") and g.chance(0.25):
        kw["dtype"] = _Raw(_dt(_acc_dtype(g, x, r.p["dtype_kw"])))
    if r.p.get("initial") and g.chance(0.15):
        kw["initial"] = _Raw(g.literal(x.dtype))
    if r.p.get("ddof") and g.chance(0.3):
        kw["ddof"] = 1
    return f"{r.fmt}({x.name}{_kw(**kw)})", [x]


def b_cumulative(g, r):
    x = g.pick(r.dts(g), min_rank=r.p.get("min_rank", 0))
    if r.fmt.startswith("lax."):
        ax = int(g.rng.integers(0, max(x.rank, 1)))
        rev = g.chance(0.3)
        return f"{r.fmt}({x.name}, axis={ax}{', reverse=True' if rev else ''})", [x]
    kw = {"axis": None if x.rank == 0 or g.chance(0.2) else int(g.rng.integers(-x.rank, x.rank))}
    if r.p.get("dtype_kw") and g.chance(0.25):
        kw["dtype"] = _Raw(_dt(_acc_dtype(g, x, r.p["dtype_kw"])))
    return f"{r.fmt}({x.name}{_kw(**kw)})", [x]


def b_astype(g, r):
    target = g.choice(ALL)
    exact = target in INT + BOOL      # float -> int truncates: a threshold op
    x = g.pick(r.dts(g), exact=exact)
    if target in INT and is_inexact(x.dtype):
        # NaN, inf and out-of-range float -> int conversions are implementation-defined in XLA
        if x.dtype in COMPLEX or not g.finite(x):
            raise Reject("float -> int of non-finite values")
        lo = 0 if target in UINT else -100
        return r.fmt.format(x=f"jnp.clip({x.name}, {lo}, 100)", t=_dt(target)), [x]
    return r.fmt.format(x=x.name, t=_dt(target)), [x]


def b_bitcast(g, r):
    # bits of exact operands only: ulp-level differences and the sign and payload of a NaN that
    # arithmetic makes (XLA's log1p(nan) is 0xffffffff, kiln's 0x7fc00000) are not the libraries' contract
    x = g.pick(NUM if r.dtypes is NUM else r.dts(g), exact=True)
    width = {"int8": 1, "uint8": 1, "int16": 2, "uint16": 2, "float16": 2, "bfloat16": 2,
             "int32": 4, "uint32": 4, "float32": 4, "int64": 8, "uint64": 8, "float64": 8,
             "complex64": 8, "complex128": 16, "bool": 1}
    same = [d for d in ALL if width[d] == width.get(x.dtype) and d not in COMPLEX + BOOL]
    if not same or x.dtype in COMPLEX + BOOL:
        raise Reject("no bitcast target")
    t = g.choice(same)
    if t in FLOAT:      # NaN payloads may be canonicalized differently: only bitcast to ints
        t = g.choice([d for d in same if d in INT] or [t])
    return f"lax.bitcast_convert_type({x.name}, {_dt(t)})", [x]


def _factor_shape(g, size, max_rank=4):
    if size == 0:
        return g.choice([(0,), (0, 2), (2, 0)])
    dims, rest = [], size
    while rest > 1 and len(dims) < max_rank - 1:
        divs = [d for d in range(2, rest + 1) if rest % d == 0]
        d = g.choice(divs)
        dims.append(d)
        rest //= d
    if rest > 1:
        dims.append(rest)
    while g.chance(0.25) and len(dims) < max_rank:
        dims.insert(int(g.rng.integers(0, len(dims) + 1)), 1)
    g.rng.shuffle(dims)
    return tuple(dims)


def b_reshape(g, r):
    x = g.pick(r.dts(g))
    s = list(_factor_shape(g, x.size))
    if s and g.chance(0.3) and x.size:
        s[int(g.rng.integers(0, len(s)))] = -1
    form = g.choice(["jnp.reshape({x}, {s})", "{x}.reshape({s})", "lax.reshape({x}, {s})"])
    if form.startswith("lax") and -1 in s:
        form = "{x}.reshape({s})"
    return form.format(x=x.name, s=tuple(s)), [x]


def b_transpose(g, r):
    x = g.pick(r.dts(g), min_rank=1)
    perm = tuple(int(i) for i in g.rng.permutation(x.rank))
    form = g.choice(["jnp.transpose({x}, {p})", "{x}.T", "lax.transpose({x}, {p})",
                     "jnp.swapaxes({x}, {a}, {b})", "jnp.moveaxis({x}, {a}, {b})"])
    a, b = int(g.rng.integers(-x.rank, x.rank)), int(g.rng.integers(-x.rank, x.rank))
    return form.format(x=x.name, p=perm, a=a, b=b), [x]


def b_expand_squeeze(g, r):
    x = g.pick(r.dts(g))
    if r.name == "jnp.squeeze":
        ones = [i for i, d in enumerate(x.shape) if d == 1]
        ax = None if not ones or g.chance(0.4) else g.choice(ones)
        return f"jnp.squeeze({x.name}{_kw(axis=ax)})", [x]
    ax = int(g.rng.integers(-x.rank - 1, x.rank + 1))
    return f"jnp.expand_dims({x.name}, {ax})", [x]


def b_broadcast_to(g, r):
    x = g.pick(r.dts(g), max_rank=2)
    s = [d if d != 1 or g.chance(0.5) else int(g.rng.integers(1, 4)) for d in x.shape]
    if g.chance(0.6):
        s = [int(g.rng.integers(1, 4))] + s
    if r.name == "lax.broadcast_in_dim":
        dims = tuple(range(len(s) - x.rank, len(s)))
        return f"lax.broadcast_in_dim({x.name}, {tuple(s)}, {dims})", [x]
    return f"jnp.broadcast_to({x.name}, {tuple(s)})", [x]


def b_concat(g, r):
    x = g.pick(r.dts(g), min_rank=1 if r.name != "jnp.stack" else 0)
    ax = int(g.rng.integers(-x.rank, x.rank)) if x.rank else 0
    parts, vars_ = [x.name], [x]
    for _ in range(int(g.rng.integers(1, 3))):
        s = list(x.shape)
        if r.name != "jnp.stack" and x.rank:
            s[ax] = int(g.rng.integers(0 if g.chance(0.1) else 1, 4))
        dt = x.dtype if g.chance(0.7) else g.choice(r.dts(g))
        y = g.pick([dt], shape=tuple(s), fresh=0.7)
        parts.append(y.name)
        vars_.append(y)
    g.rng.shuffle(parts)
    if r.name == "jnp.stack":
        ax = int(g.rng.integers(-x.rank - 1, x.rank + 1))
    return f"{r.name}([{', '.join(parts)}], axis={ax})", vars_


def b_pad(g, r):
    x = g.pick(r.dts(g), min_rank=1)
    if r.name == "lax.pad":
        cfg = []
        for d in x.shape:
            lo, hi = int(g.rng.integers(-min(d, 2), 3)), int(g.rng.integers(-min(d, 2), 3))
            cfg.append((lo, hi, int(g.rng.integers(0, 3)) if g.chance(0.4) else 0))
        return f"lax.pad({x.name}, jnp.array({g.literal(x.dtype)}, {_dt(x.dtype)}), {cfg})", [x]
    widths = [(int(g.rng.integers(0, 3)), int(g.rng.integers(0, 3))) for _ in x.shape]
    mode = g.choice(["constant", "constant", "edge", "reflect", "wrap", "symmetric"])
    extra = f", constant_values={g.literal(x.dtype)}" if mode == "constant" and g.chance(0.5) else ""
    return f"jnp.pad({x.name}, {widths}, mode={mode!r}{extra})", [x]


def b_axis_op(g, r):
    """flip / roll / repeat / tile / diff / triu / tril / diagonal / trace: one array, an axis."""
    x = g.pick(r.dts(g), min_rank=r.p.get("min_rank", 1))
    ax = int(g.rng.integers(-x.rank, x.rank)) if x.rank else 0
    k = int(g.rng.integers(-2, 3))
    n = int(g.rng.integers(1, 3))
    reps = tuple(int(g.rng.integers(1, 3)) for _ in range(int(g.rng.integers(1, x.rank + 2))))
    return r.fmt.format(x=x.name, ax=ax, pax=ax % max(x.rank, 1), k=k, n=n, reps=reps), [x]


def _slice_text(g, d):
    r = g.rng.random()
    if r < 0.15 and d > 0:
        return str(int(g.rng.integers(-d, d)))
    if r < 0.3:
        return ":"
    start = g.choice(["", str(int(g.rng.integers(-d - 1, d + 2)))])
    stop = g.choice(["", str(int(g.rng.integers(-d - 1, d + 2)))])
    step = g.choice(["", "", "2", "-1", "-2", "3"])
    return f"{start}:{stop}" + (f":{step}" if step else "")


def b_basic_index(g, r):
    x = g.pick(r.dts(g), min_rank=1)
    parts = [_slice_text(g, d) for d in x.shape[: int(g.rng.integers(1, x.rank + 1))]]
    if g.chance(0.2):
        parts.insert(int(g.rng.integers(0, len(parts) + 1)), "None")
    if g.chance(0.15):
        parts.insert(int(g.rng.integers(0, len(parts) + 1)), "...")
    if g.chance(0.02):
        parts[0] = str(x.shape[0] + 1)      # out of bounds static index: IndexError in both
    return f"{x.name}[{', '.join(parts)}]", [x]


def _index_array(g, n, oob_p=0.25, shape=None):
    shape = shape if shape is not None else g.dims(int(g.rng.integers(0, 3)))
    kind = "oob_index" if g.chance(oob_p) else "index"
    return g.new_input(shape, g.choice(["int32", "int32", "int8", "int64", "uint8"] if kind == "index"
                                       else ["int32", "int64"]), kind, bound=max(n, 1))


def b_adv_index(g, r):
    x = g.pick(r.dts(g), min_rank=1, min_size=1)
    form = g.rng.random()
    if form < 0.1:
        m = g.pick(BOOL, shape=x.shape, fresh=0.5)
        return f"{x.name}[{m.name}]", [x, m]
    i = _index_array(g, x.shape[0])
    if form < 0.55 or x.rank == 1:
        return f"{x.name}[{i.name}]", [x, i]
    j = _index_array(g, x.shape[1], shape=i.shape if g.chance(0.7) else None)
    if form < 0.8:
        return f"{x.name}[{i.name}, {j.name}]", [x, i, j]
    if form < 0.9:
        return f"{x.name}[:, {j.name}]", [x, j]
    return f"{x.name}[{i.name}, 1:]", [x, i]


def b_take(g, r):
    x = g.pick(r.dts(g), min_rank=1, min_size=1)
    ax = int(g.rng.integers(-x.rank, x.rank))
    if r.name == "jnp.take_along_axis":
        s = list(x.shape)
        s[ax] = int(g.rng.integers(1, 4))
        i = _index_array(g, x.shape[ax], oob_p=0.0, shape=tuple(s))
        return f"jnp.take_along_axis({x.name}, {i.name}, axis={ax})", [x, i]
    i = _index_array(g, x.shape[ax])
    mode = g.choice([None, "clip", "wrap", "fill"])
    return f"jnp.take({x.name}, {i.name}, axis={ax}{_kw(mode=mode) if mode else ''})", [x, i]


def b_at(g, r):
    """x.at[idx].<op>(v, mode=...): duplicate indices are common (small index ranges)."""
    op = r.p["method"]
    x = g.pick(r.dts(g), min_rank=1, min_size=1)
    form = g.rng.random()
    oob = g.chance(0.25)
    i = _index_array(g, x.shape[0], oob_p=1.0 if oob else 0.0)
    if form < 0.6 or x.rank == 1:
        idx, ivars = i.name, [i]
    elif form < 0.8:
        j = _index_array(g, x.shape[1], oob_p=0.0, shape=i.shape)
        idx, ivars = f"{i.name}, {j.name}", [i, j]
    elif form < 0.9:
        idx, ivars = f"{int(g.rng.integers(-x.shape[0], x.shape[0]))}", []
    else:
        idx, ivars = "1:", []
    modes = ["None", "'drop'", "'clip'"] + (["'promise_in_bounds'"] if not oob else [])
    if oob and op in ("min", "max"):
        # JAX's scatter-max/min JVP counts contenders with a scatter-add that drops the clamped
        # out-of-bounds index (mode is not passed on): grad gives the update inf and the operand
        # the full tangent (JAX 0.10.2 bug; kiln's derivative is the clamped update's)
        modes.remove("'clip'")
    if op == "get":
        modes = ["None", "'fill'", "'clip'"]
    mode = g.choice(modes)
    mtxt = "" if mode == "None" else f", mode={mode}"
    if op == "get":
        fill = f", fill_value={g.literal(x.dtype)}" if mode == "'fill'" and g.chance(0.5) else ""
        return f"{x.name}.at[{idx}].get({mtxt[2:]}{fill})", [x] + ivars
    tshape = g.shape_of(f"{x.name}[{idx}]")
    if g.chance(0.35):
        v, vv = g.literal(x.dtype), []
    else:
        s = tshape[int(g.rng.integers(0, len(tshape) + 1)):] if g.chance(0.3) else tshape
        val = g.new_input(s, x.dtype if g.chance(0.85) else g.choice(r.dts(g)))
        v, vv = val.name, [val]
    expr = f"{x.name}.at[{idx}].{op}({v}{mtxt})"
    if op == "set" and vv and ivars and g.duplicate_targets([x.shape[k] for k in range(len(ivars))], ivars):
        # which duplicate wins a scatter is implementation-defined (XLA): its own signature
        return expr, [x] + ivars + vv, "at.set[dup]"
    return expr, [x] + ivars + vv


def _pet(g, x, y):
    """A preferred_element_type: usually one JAX accepts for these operands (ints for int
    operands, a float at least as wide for float ones), sometimes any (a narrowing is an error)."""
    if g.chance(0.08):
        return g.choice(["float32", "float64", "int32", "float16", "bfloat16", "int64", "complex64"])
    if x.dtype in INT + BOOL and y.dtype in INT + BOOL:
        return g.choice(["int32", "int64", "float32"])
    if x.dtype in COMPLEX or y.dtype in COMPLEX:
        return g.choice(["complex64", "complex128"])
    return g.choice(["float32", "float64"])


def b_dot(g, r):
    dts = r.dts(g)
    x = g.pick(dts, min_rank=1 if r.name != "jnp.dot" else 0, max_rank=3)
    dt2 = x.dtype if g.chance(0.8) else g.choice(dts)
    name = r.name
    if name in ("jnp.matmul", "jnp.dot"):
        if x.rank == 0:
            s = g.shape(0, 2)
        elif x.rank == 1:
            s = (x.shape[0],) if g.chance(0.4) else (x.shape[0], int(g.rng.integers(1, 4)))
        else:
            s = (x.shape[-1], int(g.rng.integers(1, 4)))
            if name == "jnp.matmul" and x.rank == 3 and g.chance(0.6):
                s = (x.shape[0],) + s
        y = g.pick([dt2], shape=s, fresh=0.7)
        if name == "jnp.matmul":
            pet = f", preferred_element_type={_dt(_pet(g, x, y))}" if g.chance(0.25) else ""
            form = g.choice(["jnp.matmul({a}, {b}{p})", "{a} @ {b}"]) if not pet else "jnp.matmul({a}, {b}{p})"
            return form.format(a=x.name, b=y.name, p=pet), [x, y]
        return f"jnp.dot({x.name}, {y.name})", [x, y]
    if name == "jnp.einsum":
        letters = "abcd"[: x.rank]
        spec_x = letters
        keep = [c for c in letters if g.chance(0.5)]
        new = "e" if g.chance(0.5) else ""
        yl = [c for c in letters if g.chance(0.6)] + ([new] if new else [])
        g.rng.shuffle(yl)
        ys = tuple(x.shape[letters.index(c)] if c in letters else int(g.rng.integers(1, 4)) for c in yl)
        y = g.pick([dt2], shape=ys, fresh=0.8)
        out = "".join(keep) + (new if new and g.chance(0.7) else "")
        return f"jnp.einsum('{spec_x},{''.join(yl)}->{out}', {x.name}, {y.name})", [x, y]
    if name in ("jnp.tensordot", "jnp.inner", "jnp.outer", "jnp.vdot", "jnp.kron"):
        if name == "jnp.tensordot":
            k = int(g.rng.integers(0, x.rank + 1))
            s = x.shape[x.rank - k:] + g.dims(int(g.rng.integers(0, 2)))
            y = g.pick([dt2], shape=s, fresh=0.8)
            return f"jnp.tensordot({x.name}, {y.name}, axes={k})", [x, y]
        if name == "jnp.inner":
            y = g.pick([dt2], shape=g.dims(int(g.rng.integers(0, 2))) + x.shape[-1:], fresh=0.8)
        elif name == "jnp.vdot":
            y = g.pick([dt2], shape=_factor_shape(g, x.size, 3), fresh=0.9)
        else:
            y = g.pick([dt2], shape=g.shape(0, 2), fresh=0.8)
        return f"{name}({x.name}, {y.name})", [x, y]
    # lax.dot_general: random batch and contracting dimensions, b's axes permuted
    rank = x.rank
    dims = list(range(rank))
    g.rng.shuffle(dims)
    nb = int(g.rng.integers(0, rank)) if rank > 1 else 0
    nc = int(g.rng.integers(0, rank - nb + 1))
    bx, cx = dims[:nb], dims[nb:nb + nc]
    free = g.dims(int(g.rng.integers(0, 2)))
    yshape = [x.shape[d] for d in bx] + [x.shape[d] for d in cx] + list(free)
    perm = list(range(len(yshape)))
    g.rng.shuffle(perm)
    ys = tuple(yshape[p] for p in perm)
    pos = {p: i for i, p in enumerate(perm)}
    by = [pos[i] for i in range(nb)]
    cy = [pos[nb + i] for i in range(nc)]
    y = g.pick([dt2], shape=ys, fresh=0.8)
    pet = f", preferred_element_type={_dt(_pet(g, x, y))}" if g.chance(0.4) else ""
    dn = f"(({tuple(cx)}, {tuple(cy)}), ({tuple(bx)}, {tuple(by)}))"
    return f"lax.dot_general({x.name}, {y.name}, {dn}{pet})", [x, y]


def b_sort(g, r):
    # top_k's values also read exact operands: its total order ranks -NaN last and +NaN first, and
    # the sign of a NaN that arithmetic makes is the hardware's (XLA's x86 NaN is negative)
    x = g.pick(r.dts(g), min_rank=1, exact=r.disc or r.name.startswith("lax.top_k"),
               max_rank=1 if r.name == "jnp.searchsorted" else 3)
    ax = int(g.rng.integers(-x.rank, x.rank))
    if r.name in ("jnp.sort", "jnp.argsort"):
        kw = {"axis": ax}
        if g.chance(0.3):
            kw["descending"] = True
        if g.chance(0.2):
            kw["stable"] = False if r.name == "jnp.sort" else True
        return f"{r.name}({x.name}{_kw(**kw)})", [x]
    if r.name.startswith("lax.top_k"):
        k = int(g.rng.integers(0 if g.chance(0.05) or x.shape[-1] == 0 else 1, x.shape[-1] + 1))  # (an empty axis: k = 0)
        return f"lax.top_k({x.name}, {k})[{r.p['which']}]", [x]
    if r.name == "lax.sort":
        return f"lax.sort({x.name}, dimension={ax % x.rank}, is_stable={g.chance(0.5)})", [x]
    # searchsorted: a sorted 1-D haystack
    if x.rank != 1:
        raise Reject("1-D haystack")
    v, vv = g.partner(x, [x.dtype], exact=True, literal_p=0.2, shape_mode=g.choice(["same", "scalar", "lead"]))
    side = g.choice(["left", "right"])
    method = g.choice(["scan", "sort", "compare_all", "scan_unrolled"])
    return f"jnp.searchsorted(jnp.sort({x.name}), {v}, side={side!r}, method={method!r})", [x] + ([vv] if vv else [])


_BODIES = {
    "bool": ["jnp.logical_not({a})", "{a} ^ True", "{a} & {a}"],
    "int": ["{a} * 2", "{a} + 1", "-{a}", "{a} * {a}", "jnp.abs({a})", "{a} // 2"],
    "float": ["{a} * 2", "{a} + 1", "-{a}", "{a} * {a}", "jnp.sin({a})", "jnp.cos({a}) * {a}", "{a} / 2",
              "jnp.maximum({a}, 0)"],
    "complex": ["{a} * 2", "{a} + 1", "-{a}", "{a} * {a}", "jnp.sin({a})", "{a} / 2", "jnp.conj({a})"],
}


def _body(g, dtype, a="a"):
    fam = "bool" if dtype == "bool" else "int" if dtype in INT else "complex" if dtype in COMPLEX else "float"
    return g.choice(_BODIES[fam]).format(a=a)


def b_control(g, r):
    x = g.pick(r.dts(g), min_rank=1 if r.name in ("lax.scan", "lax.map", "lax.associative_scan") else 0)
    n = r.name
    if n == "lax.cond":
        if g.chance(0.5):
            p = g.new_input((), g.choice(["bool", "int32"]))
            pv, pt = [p], p.name
        else:
            q = g.pick(BOOL)
            pv, pt = [q], f"jnp.any({q.name})"
        return f"lax.cond({pt}, lambda a: {_body(g, x.dtype)}, lambda a: {_body(g, x.dtype)}, {x.name})", pv + [x]
    if n == "lax.switch":
        i = g.new_input((), "int32", "oob_index", bound=3)
        bs = ", ".join(f"lambda a: {_body(g, x.dtype)}" for _ in range(int(g.rng.integers(1, 4))))
        return f"lax.switch({i.name}, [{bs}], {x.name})", [i, x]
    if n == "lax.while_loop":
        if g.chance(0.5):
            k = g.new_input((), "int32", "small_nonneg")
            kt, kv = k.name, [k]
        else:
            kt, kv = str(int(g.rng.integers(0, 5))), []
        return (f"lax.while_loop(lambda c: c[0] < {kt}, lambda c: (c[0] + 1, {_body(g, x.dtype, 'c[1]')}), "
                f"(0, {x.name}))[1]"), kv + [x]
    if n == "lax.fori_loop":
        if g.chance(0.3):
            k = g.new_input((), "int32", "small_nonneg")
            kt, kv = k.name, [k]
        else:
            kt, kv = str(int(g.rng.integers(0, 5))), []
        return f"lax.fori_loop(0, {kt}, lambda i, a: {_body(g, x.dtype)}, {x.name})", kv + [x]
    if n == "lax.scan":
        fam = "bool" if x.dtype == "bool" else "num"
        body = g.choice(["(c + r, c * r)", "(c * r, c - r)", "(r, c + r)"] if fam == "num"
                        else ["(c ^ r, c & r)", "(r, c | r)"])
        kw = ""
        if g.chance(0.3):
            kw += ", reverse=True"
        if g.chance(0.2):
            kw += ", unroll=2"
        return f"lax.scan(lambda c, r: {body}, {x.name}[0], {x.name}{kw})[{int(g.rng.integers(0, 2))}]", [x]
    if n == "lax.map":
        return f"lax.map(lambda a: {_body(g, x.dtype)}, {x.name})", [x]
    ax = int(g.rng.integers(0, x.rank))
    fn = g.choice(["jnp.add", "jnp.maximum", "jnp.multiply"]) if x.dtype != "bool" else "jnp.logical_or"
    return f"lax.associative_scan({fn}, {x.name}, axis={ax}{', reverse=True' if g.chance(0.3) else ''})", [x]


def b_dynamic_slice(g, r):
    x = g.pick(r.dts(g), min_rank=1)
    starts = []
    vars_ = [x]
    for d in x.shape:
        if g.chance(0.3):
            s = g.new_input((), "int32", "oob_index", bound=d)
            starts.append(s.name)
            vars_.append(s)
        else:
            starts.append(str(int(g.rng.integers(-2, d + 3))))
    sizes = tuple(int(g.rng.integers(0, d + 1)) for d in x.shape)
    st = "(" + ", ".join(starts) + ("," if len(starts) == 1 else "") + ")"
    if r.name == "lax.dynamic_update_slice":
        u = g.new_input(sizes, x.dtype)
        return f"lax.dynamic_update_slice({x.name}, {u.name}, {st})", vars_ + [u]
    if r.name == "lax.slice":
        lo = tuple(int(g.rng.integers(0, d + 1)) for d in x.shape)
        hi = tuple(int(g.rng.integers(l, d + 1)) for l, d in zip(lo, x.shape))
        step = tuple(int(g.rng.integers(1, 3)) for _ in x.shape)
        return f"lax.slice({x.name}, {lo}, {hi}, {step})", [x]
    return f"lax.dynamic_slice({x.name}, {st}, {sizes})", vars_


def b_create(g, r):
    x = g.pick(r.dts(g))
    dt = g.choice(ALL)
    forms = {
        "jnp.full_like": f"jnp.full_like({x.name}, {g.literal(x.dtype)})",
        "jnp.zeros_like": f"jnp.zeros_like({x.name}{', dtype=' + _dt(dt) if g.chance(0.3) else ''}) + {x.name}",
        "jnp.arange": f"{x.name} + jnp.arange({x.shape[-1] if x.rank else 1}{', dtype=' + _dt(dt) if g.chance(0.4) else ''})",
        "jnp.eye": f"jnp.eye({x.shape[-1] if x.rank else 2}, k={int(g.rng.integers(-1, 2))}{', dtype=' + _dt(dt) if g.chance(0.5) else ''}) * {x.name}",
        "jnp.linspace": f"{x.name} * jnp.linspace(0, {g.literal('float32')}, {x.shape[-1] if x.rank else 3})",
    }
    return forms[r.name], [x]


def b_nn(g, r):
    x = g.pick(r.dts(g), exact=r.disc)
    if r.name == "jax.nn.one_hot":
        if x.dtype not in INT:
            raise Reject("one_hot of ints")
        return f"jax.nn.one_hot({x.name}, {int(g.rng.integers(1, 6))})", [x]
    ax = "" if x.rank == 0 or g.chance(0.4) else f", axis={int(g.rng.integers(-x.rank, x.rank))}"
    if r.p.get("axis"):
        return f"{r.name}({x.name}{ax})", [x]
    return f"{r.name}({x.name})", [x]


# ---- the table -----------------------------------------------------------------------------------

def U(name, dtypes, kind="arith", w=1.0, fmt=None, **p):
    return Row(name, b_unary, dtypes, kind, w, fmt or (name + "({x})"), **p)


def B(name, dtypes, kind="arith", w=1.0, fmt=None, **p):
    return Row(name, b_binary, dtypes, kind, w, fmt or (name + "({a}, {b})"), **p)


def L(name, dtypes, kind="arith", w=0.5, **p):
    return Row(name, b_lax_binary, dtypes, kind, w, name + "({a}, {b})", **p)


def R(name, dtypes, kind="arith", w=1.0, **p):
    return Row(name, b_reduce, dtypes, kind, w, name, **p)


def S(name, build, dtypes=ALL, kind="keep", w=1.0, fmt=None, **p):
    return Row(name, build, dtypes, kind, w, fmt, **p)


_SUMDT = ["int32", "float32", "float16", "int8", "float64", "complex64", "uint32", "bool"]

ROWS = [
    # elementwise unary
    U("jnp.negative", NUM, "keep", fmt="-{x}"), U("jnp.abs", REAL, "keep"), U("jnp.abs", COMPLEX),
    U("jnp.sign", REAL, "disc"), U("jnp.sign", COMPLEX, "domain"),
    U("jnp.floor", REAL, "disc"), U("jnp.ceil", REAL, "disc"), U("jnp.round", REAL + COMPLEX, "disc"),
    U("jnp.trunc", REAL, "disc"), U("jnp.rint", REAL, "disc"),
    U("jnp.sqrt", NUM, "domain", w=1.2), U("jnp.cbrt", REAL), U("jnp.exp", NUM), U("jnp.exp2", REAL),
    U("jnp.expm1", NUM), U("jnp.log", NUM, "domain"), U("jnp.log1p", NUM, "domain"), U("jnp.log2", REAL, "domain"),
    # sin/cos/tan/sinc read exact operands: one ulp of a large argument (cosh(37) is 5.9e15 in
    # float32, an ulp of 5e8) is many periods, so ulp-level differences upstream decide the result
    U("jnp.sin", NUM, exact_in=True), U("jnp.cos", NUM, exact_in=True), U("jnp.tan", NUM, exact_in=True),
    U("jnp.tanh", NUM), U("jnp.sinh", NUM),
    U("jnp.cosh", NUM), U("jnp.arctan", NUM), U("jnp.arcsin", NUM, "domain"), U("jnp.arccos", REAL, "domain"),
    U("jnp.arcsinh", NUM), U("jnp.arctanh", REAL, "domain"), U("jnp.square", NUM), U("jnp.reciprocal", INEXACT),
    U("jnp.sinc", FLOAT, exact_in=True), U("jnp.logical_not", BOOL + INT, "disc"), U("jnp.invert", BOOL + INT, "keep"),
    U("jnp.isnan", INEXACT, "disc"), U("jnp.isinf", INEXACT, "disc"), U("jnp.isfinite", INEXACT, "disc"),
    U("jnp.conj", NUM, "keep"), U("jnp.real", NUM, "keep"), U("jnp.imag", NUM, "keep"),
    U("jnp.angle", FLOAT + COMPLEX, "domain"), U("jnp.nan_to_num", INEXACT, "keep"),
    U("lax.logistic", INEXACT), U("lax.rsqrt", INEXACT, "domain"), U("lax.erf", FLOAT), U("lax.lgamma", FLOAT, "domain"),
    U("lax.population_count", INT, "keep"), U("lax.clz", INT, "keep"), U("lax.is_finite", FLOAT, "disc"),
    U("lax.integer_pow", NUM, fmt="lax.integer_pow({x}, 3)"), U("lax.integer_pow", INEXACT, fmt="lax.integer_pow({x}, -2)"),
    U("lax.neg", NUM, "keep"), U("lax.exp", INEXACT), U("lax.tanh", INEXACT), U("lax.sign", REAL, "disc"),
    U("lax.floor", FLOAT, "disc"), U("lax.round", FLOAT, "disc", fmt="lax.round({x}, lax.RoundingMethod.TO_NEAREST_EVEN)"),
    U("lax.reduce_precision", FLOAT, "disc", fmt="lax.reduce_precision({x}, 5, 10)"),
    U("jax.nn.relu", FLOAT, "keep"), U("jax.nn.sigmoid", FLOAT), U("jax.nn.gelu", FLOAT), U("jax.nn.silu", FLOAT),
    U("jax.nn.softplus", FLOAT),
    Row("astype", b_astype, ALL, "keep", 2.0, "{x}.astype({t})"),
    Row("lax.convert_element_type", b_astype, ALL, "keep", 0.7, "lax.convert_element_type({x}, {t})"),
    Row("lax.bitcast_convert_type", b_bitcast, NUM, "keep", 0.4),
    # elementwise binary (jnp broadcasts and promotes; Python scalars are weakly typed)
    B("jnp.add", ALL, fmt="{a} + {b}", w=2.5), B("jnp.subtract", NUM, fmt="{a} - {b}", w=1.5),
    B("jnp.multiply", ALL, fmt="{a} * {b}", w=2.0), B("jnp.divide", NUM, fmt="{a} / {b}", w=1.2),
    B("jnp.add", ALL), B("jnp.multiply", ALL),
    B("jnp.floor_divide", SINT + UINT, "disc", fmt="{a} // {b}", ykind="nonzero", swap=False),
    B("jnp.floor_divide", FLOAT, "domain", fmt="{a} // {b}"),
    B("jnp.remainder", SINT + UINT, "disc", fmt="{a} % {b}", ykind="nonzero", swap=False),
    B("jnp.remainder", FLOAT, "domain", fmt="jnp.remainder({a}, {b})"),
    B("jnp.fmod", SINT + UINT, "disc", ykind="nonzero", swap=False), B("jnp.fmod", FLOAT, "domain"),
    B("jnp.power", INT, "keep", fmt="{a} ** {b}", ykind="small_nonneg", swap=False),
    B("jnp.power", FLOAT + COMPLEX, "domain", fmt="jnp.power({a}, {b})"),
    B("jnp.maximum", ALL, "keep", w=1.2), B("jnp.minimum", ALL, "keep"), B("jnp.fmax", FLOAT, "keep"),
    B("jnp.arctan2", FLOAT, "domain"), B("jnp.hypot", FLOAT), B("jnp.logaddexp", FLOAT),
    B("jnp.copysign", FLOAT, "disc"), B("jnp.nextafter", FLOAT, "disc"), B("jnp.heaviside", FLOAT, "disc"),
    B("jnp.bitwise_and", INT + BOOL, "keep", fmt="{a} & {b}"), B("jnp.bitwise_or", INT + BOOL, "keep", fmt="{a} | {b}"),
    B("jnp.bitwise_xor", INT + BOOL, "keep", fmt="{a} ^ {b}"),
    B("jnp.left_shift", INT, "keep", ykind="shift", swap=False), B("jnp.right_shift", INT, "keep", fmt="{a} >> {b}",
                                                                    ykind="shift", swap=False),
    B("jnp.logical_and", ALL, "disc"), B("jnp.logical_or", BOOL, "disc"), B("jnp.logical_xor", BOOL + INT, "disc"),
    B("jnp.equal", ALL, "disc", fmt="{a} == {b}"), B("jnp.not_equal", ALL, "disc", fmt="{a} != {b}"),
    B("jnp.less", REAL + BOOL, "disc", fmt="{a} < {b}", w=1.2), B("jnp.less_equal", REAL, "disc", fmt="{a} <= {b}"),
    B("jnp.greater", REAL, "disc"), B("jnp.greater_equal", REAL, "disc", fmt="{a} >= {b}"),
    B("jnp.isclose", INEXACT, "disc"),
    L("lax.add", NUM), L("lax.sub", NUM), L("lax.mul", NUM), L("lax.div", INEXACT),
    L("lax.div", INT, "disc", ykind="nonzero"), L("lax.rem", INT, "disc", ykind="nonzero"), L("lax.rem", FLOAT, "domain"),
    L("lax.max", ALL, "keep"), L("lax.min", ALL, "keep"), L("lax.pow", INEXACT, "domain"), L("lax.atan2", FLOAT, "domain"),
    L("lax.nextafter", FLOAT, "disc"), L("lax.shift_right_logical", INT, "keep", ykind="shift"),
    L("lax.shift_right_arithmetic", INT, "keep", ykind="shift"), L("lax.shift_left", INT, "keep", ykind="shift"),
    L("lax.eq", ALL, "disc"), L("lax.lt", REAL, "disc"), L("lax.ge", REAL, "disc"), L("lax.complex", ("float32", "float64")),
    # selection
    S("jnp.where", b_where, ALL, "keep", 1.5), S("lax.select", b_select, ALL, "keep", 0.8),
    S("jnp.clip", b_clip, REAL, "keep", 1.0), S("lax.clamp", b_clip, REAL, "keep", 0.4),
    # reductions
    R("jnp.sum", ALL, w=2.0, dtype_kw=_SUMDT), R("jnp.prod", NUM, dtype_kw=_SUMDT), R("jnp.mean", NUM, w=1.0, dtype_kw=_SUMDT),
    R("jnp.max", ALL, "keep", w=1.5, initial=True), R("jnp.min", ALL, "keep", initial=True),
    R("jnp.argmax", REAL + BOOL, "disc", tuples=False), R("jnp.argmin", REAL, "disc", tuples=False),
    R("jnp.any", ALL, "disc"), R("jnp.all", ALL, "disc"), R("jnp.var", FLOAT + COMPLEX, ddof=True),
    R("jnp.std", FLOAT), R("jnp.count_nonzero", ALL, "disc", keepdims=False), R("jnp.ptp", REAL, "keep"),
    R("jax.nn.logsumexp", FLOAT), R("jnp.nansum", FLOAT), R("jnp.nanmax", FLOAT, "keep"),
    R("lax.reduce_max", REAL, "keep", w=0.3), R("lax.reduce_sum", NUM, w=0.3),
    Row("jnp.cumsum", b_cumulative, NUM + BOOL, "arith", 1.2, "jnp.cumsum", dtype_kw=_SUMDT),
    Row("jnp.cumprod", b_cumulative, NUM, "arith", 1.0, "jnp.cumprod", dtype_kw=_SUMDT),
    Row("lax.cummax", b_cumulative, REAL, "keep", 0.4, "lax.cummax", min_rank=1),
    Row("lax.cumsum", b_cumulative, NUM, "arith", 0.4, "lax.cumsum", min_rank=1),
    Row("lax.cumlogsumexp", b_cumulative, FLOAT, "arith", 0.3, "lax.cumlogsumexp", min_rank=1),
    # shape and structure
    S("reshape", b_reshape, w=1.5), S("transpose", b_transpose, w=1.5), S("jnp.squeeze", b_expand_squeeze, w=0.5),
    S("jnp.expand_dims", b_expand_squeeze, w=0.5), S("jnp.broadcast_to", b_broadcast_to),
    S("lax.broadcast_in_dim", b_broadcast_to, w=0.4), S("jnp.concatenate", b_concat, w=1.2), S("jnp.stack", b_concat, w=0.6),
    S("jnp.pad", b_pad), S("lax.pad", b_pad, w=0.7),
    S("jnp.flip", b_axis_op, fmt="jnp.flip({x}, {ax})", w=0.6), S("jnp.roll", b_axis_op, fmt="jnp.roll({x}, {k}, {ax})", w=0.6),
    S("jnp.repeat", b_axis_op, fmt="jnp.repeat({x}, {n}, axis={ax})", w=0.5),
    S("jnp.tile", b_axis_op, fmt="jnp.tile({x}, {reps})", w=0.5, min_rank=0),
    S("jnp.diff", b_axis_op, NUM, "arith", fmt="jnp.diff({x}, axis={ax})", w=0.5),
    S("jnp.triu", b_axis_op, fmt="jnp.triu({x}, {k})", w=0.4, min_rank=2),
    S("jnp.tril", b_axis_op, fmt="jnp.tril({x}, {k})", w=0.3, min_rank=2),
    S("jnp.diagonal", b_axis_op, fmt="jnp.diagonal({x}, {k})", w=0.4, min_rank=2),
    S("jnp.trace", b_axis_op, NUM, "arith", fmt="jnp.trace({x}, {k})", w=0.3, min_rank=2),
    S("lax.rev", b_axis_op, fmt="lax.rev({x}, ({pax},))", w=0.3),
    # indexing
    S("getitem", b_basic_index, w=2.0), S("getitem[int array]", b_adv_index, w=2.0),
    S("jnp.take", b_take, w=0.8), S("jnp.take_along_axis", b_take, w=0.6),
    S("lax.dynamic_slice", b_dynamic_slice, w=0.6), S("lax.dynamic_update_slice", b_dynamic_slice, w=0.6),
    S("lax.slice", b_dynamic_slice, w=0.4),
    S("at.set", b_at, w=1.0, method="set"), S("at.add", b_at, NUM + BOOL, "arith", w=1.0, method="add"),
    S("at.mul", b_at, NUM, "arith", w=0.6, method="multiply"), S("at.min", b_at, REAL, w=0.6, method="min"),
    S("at.max", b_at, REAL, w=0.6, method="max"), S("at.get", b_at, w=0.5, method="get"),
    # products
    S("jnp.matmul", b_dot, NUM, "arith", 1.5), S("jnp.dot", b_dot, NUM, "arith", 0.8), S("jnp.einsum", b_dot, NUM, "arith", 1.0),
    S("lax.dot_general", b_dot, NUM, "arith", 1.0), S("jnp.tensordot", b_dot, NUM, "arith", 0.4),
    S("jnp.inner", b_dot, NUM, "arith", 0.3), S("jnp.outer", b_dot, NUM, "arith", 0.3), S("jnp.vdot", b_dot, NUM, "arith", 0.3),
    S("jnp.kron", b_dot, NUM, "arith", 0.2),
    # sorting
    S("jnp.sort", b_sort, REAL + BOOL, "keep", 1.0), S("jnp.argsort", b_sort, REAL + BOOL, "disc", 0.8),
    S("jnp.searchsorted", b_sort, REAL, "disc", 0.6), S("lax.top_k[0]", b_sort, REAL, "keep", 0.5, which=0),
    S("lax.top_k[1]", b_sort, REAL, "disc", 0.5, which=1), S("lax.sort", b_sort, REAL + COMPLEX, "keep", 0.3),
    # control flow
    S("lax.cond", b_control, ALL, "arith", 1.0), S("lax.switch", b_control, ALL, "arith", 0.6),
    S("lax.while_loop", b_control, ALL, "arith", 0.8), S("lax.fori_loop", b_control, ALL, "arith", 0.8),
    S("lax.scan", b_control, NUM + BOOL, "arith", 0.8), S("lax.map", b_control, ALL, "arith", 0.4),
    S("lax.associative_scan", b_control, NUM + BOOL, "arith", 0.4),
    # creation mixed with operands
    S("jnp.full_like", b_create, ALL, "keep", 0.3), S("jnp.zeros_like", b_create, ALL, "keep", 0.3),
    S("jnp.arange", b_create, NUM, "keep", 0.4), S("jnp.eye", b_create, NUM, "keep", 0.3),
    S("jnp.linspace", b_create, FLOAT, "arith", 0.3),
    # nn
    S("jax.nn.softmax", b_nn, FLOAT, "arith", 0.5, axis=True), S("jax.nn.log_softmax", b_nn, FLOAT, "arith", 0.3, axis=True),
    S("jax.nn.one_hot", b_nn, INT, "disc", 0.3),
]
