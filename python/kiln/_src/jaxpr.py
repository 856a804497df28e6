"""jax.core's program classes as views of kiln programs: what make_jaxpr returns (ClosedJaxpr), its
Jaxpr (constvars, invars, outvars, eqns), JaxprEqn, Var, Literal, and eval_jaxpr / jaxpr_as_fun.

A kiln program lives in C (a Builder); the view reads its equations once (Builder.equations) and
names every value with a Var. kiln's `literal` equations become Literal operands of the equations
that read them, as JAX's literals are; equation params holding a body (a Builder: cond branches,
loop bodies) hold the body's ClosedJaxpr view instead. Evaluating a view binds each equation with
the params kiln recorded, so eval_jaxpr of a make_jaxpr result computes what the function does,
and under jit, grad or vmap it traces like any other kiln code.

Imports the core modules only; primitive.py supplies the Primitive objects equations name."""
import itertools

import numpy as np

from kiln._src import core

_counter = itertools.count()


class Var:
    """A value of a program: its abstract value (aval) and a name for printing."""
    __slots__ = ("aval", "count", "suffix", "_vid")

    def __init__(self, aval, suffix="", *, vid=None):
        self.aval = aval
        self.suffix = suffix
        self.count = next(_counter)
        self._vid = vid

    def __repr__(self):
        return f"Var(id={id(self)}){self.suffix}:{self.aval.str_short()}"

    def pretty_print(self, context=None, *, print_dtype=True):
        del context
        return f"_{self.count}" + (f":{self.aval.str_short()}" if print_dtype else "")


class DropVar(Var):
    """An equation output nothing reads."""
    __slots__ = ()

    def __repr__(self):
        return "_"


class Literal:
    """A constant operand of an equation: its value and abstract value."""
    __slots__ = ("val", "aval")

    def __init__(self, val, aval):
        self.val = val
        self.aval = aval

    def __repr__(self):
        return f"Literal({_py(self.val)})"

    def pretty_print(self, context=None, *, print_dtype=True):
        del context, print_dtype
        return repr(_py(self.val))


class JaxprEqn:
    """One equation: outvars = primitive(*invars, **params)."""
    __slots__ = ("invars", "outvars", "primitive", "params", "effects", "source_info", "ctx", "_raw")

    def __init__(self, invars, outvars, primitive, params, effects=frozenset(), source_info=None, ctx=None,
                 raw=None):
        self.invars, self.outvars, self.primitive, self.params = list(invars), list(outvars), primitive, params
        if source_info is None:  # kiln records no source: an empty one (haiku reads its name_stack)
            from kiln.extend.source_info_util import SourceInfo
            source_info = SourceInfo()
        self.effects, self.source_info, self.ctx, self._raw = effects, source_info, ctx, raw

    def replace(self, **kwargs):
        fields = {n: getattr(self, n) for n in ("invars", "outvars", "primitive", "params", "effects",
                                                "source_info", "ctx")}
        fields.update(kwargs)
        return JaxprEqn(**fields)

    def __repr__(self):
        outs = " ".join(v.pretty_print() for v in self.outvars)
        ins = " ".join(v.pretty_print(print_dtype=False) for v in self.invars)
        shown = {k: v for k, v in self.params.items() if not isinstance(v, ClosedJaxpr)}
        params = ("[" + " ".join(f"{k}={v!r}" for k, v in shown.items()) + "]") if shown else ""
        return f"{outs} = {self.primitive}{params} {ins}".rstrip()


class Jaxpr:
    """A program: constvars and invars in, outvars out, eqns in order."""
    __slots__ = ("constvars", "invars", "outvars", "eqns", "effects", "debug_info", "_text", "_builder")

    def __init__(self, constvars, invars, outvars, eqns, effects=frozenset(), debug_info=None, *, text=None):
        self.constvars, self.invars, self.outvars = list(constvars), list(invars), list(outvars)
        self.eqns, self.effects, self.debug_info, self._text = list(eqns), effects, debug_info, text
        self._builder = None  # the kiln program it shows (view), when it has no constvars: a body for bind

    @property
    def in_avals(self):
        return [v.aval for v in self.invars]

    @property
    def out_avals(self):
        return [v.aval for v in self.outvars]

    def replace(self, **kwargs):
        fields = {n: getattr(self, n) for n in ("constvars", "invars", "outvars", "eqns", "effects", "debug_info")}
        fields.update(kwargs)
        return Jaxpr(**fields)

    def pretty_print(self, **kwargs):
        del kwargs
        return str(self)

    def __str__(self):
        if self._text is not None:
            return self._text
        lines = ["{ lambda " + " ".join(v.pretty_print() for v in self.constvars) + " ; " +
                 " ".join(v.pretty_print() for v in self.invars) + " . let"]
        lines += ["    " + repr(e) for e in self.eqns]
        lines.append("  in (" + ", ".join(v.pretty_print(print_dtype=False) for v in self.outvars) + ") }")
        return "\n".join(lines)

    __repr__ = __str__


class ClosedJaxpr:
    """A Jaxpr with its constants' values (what make_jaxpr returns; prints as the program)."""
    __slots__ = ("jaxpr", "consts", "_num_eqns", "_traced", "__weakref__")

    def __init__(self, jaxpr, consts, *, num_eqns=None, traced=None):
        self.jaxpr = jaxpr
        self.consts = list(consts)
        self._num_eqns = num_eqns
        self._traced = traced  # (make_jaxpr's: kiln's traced program, its Builder for kiln's own tools)

    @property
    def in_avals(self):
        return [v.aval for v in self.jaxpr.invars]

    @property
    def out_avals(self):
        return [v.aval for v in self.jaxpr.outvars]

    @property
    def literals(self):
        return self.consts

    @property
    def eqns(self):
        return self.jaxpr.eqns

    @property
    def effects(self):
        return self.jaxpr.effects

    @property
    def num_eqns(self):
        """kiln's count of the program's equations (its literals included)."""
        return len(self.jaxpr.eqns) if self._num_eqns is None else self._num_eqns

    def map_jaxpr(self, f):
        return ClosedJaxpr(f(self.jaxpr), self.consts)

    def replace(self, *, jaxpr=None, consts=None):
        return ClosedJaxpr(self.jaxpr if jaxpr is None else jaxpr, self.consts if consts is None else consts)

    def pretty_print(self, **kwargs):
        del kwargs
        return str(self)

    def __str__(self):
        return str(self.jaxpr)

    __repr__ = __str__

    def __call__(self, *args):
        return jaxpr_as_fun(self)(*args)


def _shaped(shape, dtype, weak):
    from kiln._src.extras import ShapedArray
    return ShapedArray(tuple(shape), np.dtype(dtype), bool(weak))



def literal_value(params, dt):
    """The Python value of a `literal` equation of NumPy dtype `dt`, from its params as
    Builder.equations() gives them (an unsigned literal's int_value is its bits as int64)."""
    if dt.kind == "c":
        return complex(params["value"], params.get("imag", 0.0))
    if dt.kind == "b":
        return bool(params["int_value"])
    if dt.kind == "u":
        return params["int_value"] % (1 << (8 * dt.itemsize))
    return params["int_value"] if dt.kind == "i" else params["value"]

def view(builder, consts, n_args=None, *, text=None):
    """The ClosedJaxpr of a kiln program: its inputs after the first n_args (all when None) are
    constvars, bound to `consts`."""
    from kiln._src.primitive import primitive_named
    inputs, outputs = builder.inputs(), builder.outputs()
    n_args = len(inputs) if n_args is None else n_args
    names = {}

    def var(vid):
        v = names.get(vid)
        if v is None:
            _, shape, dtype, weak = builder.aval(vid)
            v = names[vid] = Var(_shaped(shape, dtype, weak), vid=vid)
        return v

    invars = [var(i) for i in inputs[:n_args]]
    constvars = [var(i) for i in inputs[n_args:]]
    eqns, literals, raw_eqns = [], {}, builder.equations()
    for prim, ins, outs, params in raw_eqns:
        if prim == "literal" and len(outs) == 1:
            _, shape, dtype, weak = builder.aval(outs[0])
            value = literal_value(params, np.dtype(dtype))
            # a 0-d NumPy array of its dtype, as JAX's literal values are (typed: a library binding
            # a primitive on it gets that dtype)
            value = np.asarray(value, dtype=np.dtype(dtype))
            literals[outs[0]] = Literal(value, _shaped(shape, dtype, weak))
            continue
        shown = {}
        for k, v in params.items():
            shown[k] = view(v, [], None) if type(v).__name__ == "Builder" else v
        eqns.append(JaxprEqn([literals.get(i) or var(i) for i in ins], [var(o) for o in outs],
                             primitive_named(prim), shown, raw=(prim, params)))
    outvars = [literals.get(o) or var(o) for o in outputs]
    jaxpr = Jaxpr(constvars, invars, outvars, eqns, text=text)
    if not constvars:
        jaxpr._builder = builder
    return ClosedJaxpr(jaxpr, consts, num_eqns=len(raw_eqns))


def body_param(v, prim, name):
    """A param value as core.bind takes it: a Jaxpr or ClosedJaxpr (a body shown by make_jaxpr or
    Jaxpr.eqns, or a program made again from one: equinox's finalise_jaxpr) as its kiln program."""
    j = v.jaxpr if isinstance(v, ClosedJaxpr) else v if isinstance(v, Jaxpr) else None
    if j is None:
        return v
    if j._builder is None or (isinstance(v, ClosedJaxpr) and v.consts):
        raise NotImplementedError(f"{prim}: parameter {name} is a jaxpr with constants; kiln takes a program "
                                  f"without constants as a body (close over the values as arguments instead)")
    return j._builder


def eval_jaxpr(jaxpr, consts, *args, propagate_source_info=True):
    """The values of jaxpr's outvars for its constvars bound to consts and invars to args (as
    jax.core.eval_jaxpr): each equation binds its primitive; under a trace it traces."""
    del propagate_source_info
    if isinstance(jaxpr, ClosedJaxpr):
        raise TypeError("eval_jaxpr: expected a Jaxpr (closed_jaxpr.jaxpr), got a ClosedJaxpr; "
                        "use jaxpr_as_fun(closed_jaxpr) to call a ClosedJaxpr")
    if len(consts) != len(jaxpr.constvars) or len(args) != len(jaxpr.invars):
        raise TypeError(f"eval_jaxpr: the jaxpr takes {len(jaxpr.constvars)} constants and {len(jaxpr.invars)} "
                        f"arguments, got {len(consts)} and {len(args)}")
    env = {}

    def read(v):
        return v.val if isinstance(v, Literal) else env[v]

    for v, x in zip(jaxpr.constvars, consts):
        env[v] = x
    for v, x in zip(jaxpr.invars, args):
        env[v] = x
    for eqn in jaxpr.eqns:
        ins = [read(v) for v in eqn.invars]
        if eqn._raw is not None:  # an equation kiln recorded: bound with kiln's own params
            name, params = eqn._raw
            outs = core.bind(name, [_as_operand(x, v.aval) for x, v in zip(ins, eqn.invars)], params)
        else:
            outs = eqn.primitive.bind(*ins, **eqn.params)
            if not eqn.primitive.multiple_results:
                outs = [outs]
        for v, x in zip(eqn.outvars, outs):
            if not isinstance(v, DropVar):
                env[v] = x
    return [read(v) for v in jaxpr.outvars]


def _py(v):
    return v.item() if isinstance(v, np.ndarray) and v.ndim == 0 else v


def _as_operand(x, aval):
    """x as an operand of core.bind: arrays and tracers as they are, Python and NumPy values as
    arrays of the aval's dtype (a weak literal stays weak)."""
    if isinstance(x, core.Array):
        return x
    if isinstance(x, (np.ndarray, np.generic)) and np.ndim(x) == 0:
        x = x.item()  # a scalar literal stays a literal of the trace replaying it (never a constant input)
    if isinstance(x, (int, float, complex, bool)):
        return core.scalar_constant(x, np.dtype(aval.dtype), bool(aval.weak_type))
    return core.asarray(np.asarray(x, dtype=aval.dtype))


def jaxpr_as_fun(closed_jaxpr, *args):
    """closed_jaxpr as a function of its arguments (as jax.core.jaxpr_as_fun)."""
    def fun(*a):
        return eval_jaxpr(closed_jaxpr.jaxpr, closed_jaxpr.consts, *a)
    return fun(*args) if args else fun


def subjaxprs(jaxpr):
    """The Jaxprs in jaxpr's equations' params (bodies), outermost first, not recursively."""
    for eqn in jaxpr.eqns:
        for j in jaxprs_in_params(eqn.params):
            yield j


def jaxprs_in_params(params):
    out = []
    for v in params.values():
        for x in (v if isinstance(v, (tuple, list)) else (v,)):
            if isinstance(x, ClosedJaxpr):
                out.append(x.jaxpr)
            elif isinstance(x, Jaxpr):
                out.append(x)
    return out
