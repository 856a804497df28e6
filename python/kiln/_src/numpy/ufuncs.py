"""kiln.numpy element-wise functions (NumPy's ufuncs) with JAX's dtype rules, built on kiln.lax only.

Most functions are made by a few factories from a table-like list below: the factory fixes how the
arguments are promoted (exact, inexact, integer-only, boolean) and the kiln.lax rule computes the value.
"""

import math

import numpy as np

from kiln import lax
from kiln._src import core
from kiln._src import dtypes
from kiln._src.numpy import util
from kiln._src.numpy.util import (promote_args, promote_args_inexact, full_like_scalar as _c,
                                  is_int_dtype, is_bool_dtype, is_inexact_dtype,
                                  is_complex_dtype)

__all__ = [
    "add", "subtract", "multiply", "divide", "true_divide", "floor_divide", "divmod", "mod", "remainder",
    "fmod", "power", "pow", "float_power", "negative", "positive",
    "exp", "exp2", "expm1", "log", "log2", "log10", "log1p",
    "sin", "cos", "tan", "arcsin", "arccos", "arctan", "sinh", "cosh", "tanh", "arcsinh", "arccosh",
    "arctanh", "asin", "acos", "atan", "asinh", "acosh", "atanh", "arctan2", "atan2", "hypot",
    "sqrt", "cbrt", "square", "reciprocal", "abs", "absolute", "fabs", "sign",
    "floor", "ceil", "round", "around", "round_", "rint", "trunc", "fix",
    "minimum", "maximum", "fmin", "fmax", "clip", "where",
    "isnan", "isinf", "isfinite", "isposinf", "isneginf", "signbit", "nan_to_num",
    "logical_and", "logical_or", "logical_xor", "logical_not",
    "bitwise_and", "bitwise_or", "bitwise_xor", "bitwise_not", "bitwise_invert", "invert",
    "left_shift", "right_shift", "bitwise_left_shift", "bitwise_right_shift",
    "equal", "not_equal", "less", "less_equal", "greater", "greater_equal",
    "deg2rad", "rad2deg", "degrees", "radians", "copysign", "heaviside", "logaddexp", "logaddexp2",
    "sinc", "conj", "conjugate", "real", "imag", "angle", "iscomplexobj", "isrealobj", "iscomplex", "isreal",
    "gcd", "lcm",
]


def _name(fn, name, doc):
    fn.__name__ = fn.__qualname__ = name
    fn.__doc__ = doc
    return fn


# Functions JAX refuses complex inputs for (TypeError). Every other function computes on complex numbers as
# JAX does: ordering ones (less, maximum, fmin, ...) lexicographically, real part first; rounding ones
# (rint, round) on each part.
_REAL_ONLY = frozenset("""
floor ceil trunc fix hypot cbrt copysign heaviside floor_divide remainder mod fmod fabs signbit isposinf
isneginf nextafter spacing
""".split())


# the real-only ops whose complex inputs JAX rejects with ValueError ("not well defined for
# complex-valued inputs"); the others raise TypeError, as JAX's dtype checks (bug, issue 32:
# hypot raised TypeError)
_COMPLEX_VALUE_ERROR = frozenset({"hypot", "signbit"})


def _reject_complex(opname, *xs):
    if opname not in _REAL_ONLY:
        return
    for x in xs:
        if is_complex_dtype(x.dtype):
            raise (ValueError if opname in _COMPLEX_VALUE_ERROR else TypeError)(f"{opname} does not accept complex inputs (got {x.dtype}); "
                            "apply it to the real and imaginary parts (real, imag) or to abs")


def _per_part(rule):
    """A real rule applied to a complex number's real and imaginary parts (JAX's rint and round)."""
    return lambda x: lax.complex(rule(lax.real(x)), rule(lax.imag(x)))


# ---------------------------------------------------------------------------------------------------------
# Factories

def _unary_inexact(name, rule, complex_rule=None):
    """Unary op on floats; bools and integers are promoted to the default float first (as JAX)."""
    def fn(x, /):
        if not (isinstance(x, core.Array) and x.dtype.kind == "f"):  # floats need no promotion
            x, = promote_args_inexact(name, x)
            if x.dtype.kind == "c":
                _reject_complex(name, x)
                return rule(x) if complex_rule is None else complex_rule(x)
        return rule(x)
    return _name(fn, name, f"Element-wise {name} (kiln.numpy); integer and bool inputs give floats.")


def _fit(out, shape, name):
    """Broadcasts a result computed from rank-0 operands up to the operands' common shape."""
    return out if out.shape == shape else util.broadcast_to_shape(out, shape, name)


def _binary_inexact(name, rule):
    def fn(x1, x2, /):
        fast = util.fast_promote2(x1, x2)
        if fast is not None and fast[0].dtype.kind == "f":
            x1, x2 = fast
            shape = x1.shape if x1.ndim >= x2.ndim else x2.shape
        else:
            (x1, x2), shape = util.promote_args_elementwise_inexact(name, x1, x2)
            _reject_complex(name, x1)
        return _fit(rule(x1, x2), shape, name)
    return _name(fn, name, f"Element-wise {name} (kiln.numpy) with broadcasting; ints give floats.")


def _binary(name, rule):
    """Binary op on the promoted dtype (bool/int/float), broadcasting as NumPy."""
    def fn(x1, x2, /):
        fast = util.fast_promote2(x1, x2)
        if fast is not None:
            x1, x2 = fast
            shape = x1.shape if x1.ndim >= x2.ndim else x2.shape
        else:
            (x1, x2), shape = util.promote_args_elementwise(name, x1, x2)
            _reject_complex(name, x1)
        return _fit(rule(x1, x2), shape, name)
    return _name(fn, name, f"Element-wise {name} (kiln.numpy) with broadcasting.")


def _binary_integer(name, rule):
    """Binary op accepted on bool and integer dtypes only (bitwise ops, shifts)."""
    def fn(x1, x2, /):
        (x1, x2), shape = util.promote_args_elementwise(name, x1, x2)
        if not (is_int_dtype(x1.dtype) or is_bool_dtype(x1.dtype)):
            raise TypeError(f"{name}: only integer and bool inputs are supported, got {x1.dtype}")
        return _fit(rule(x1, x2), shape, name)
    return _name(fn, name, f"Element-wise {name} (kiln.numpy) for integer and bool arrays.")


def _to_bool(x):
    """x != 0 against JAX's lax._const(x, 0): weak (a Python scalar) for a weak 0-d x, else strong, so
    logical_and(0.5, int32 scalar) is a weak bool and logical_and(0.5, int32 vector) is not (JAX's;
    bug, issue 32: kiln's were never weak)."""
    if is_bool_dtype(x.dtype):
        return x
    zero = _c(x, 0)
    if x.weak_type and x.ndim == 0:
        zero = lax.convert_element_type(zero, zero.dtype, True)
    return lax.ne(x, zero)


def _binary_logical(name, rule):
    def fn(x1, x2, /):
        (x1, x2), shape = util.promote_args_elementwise(name, x1, x2)
        return _fit(rule(_to_bool(x1), _to_bool(x2)), shape, name)
    return _name(fn, name, f"Element-wise {name} (kiln.numpy); nonzero counts as True.")


def _unary_keep_int(name, float_rule):
    """Rounding-like op: identity on bool/int (as JAX), `float_rule` on floats."""
    def fn(x, /):
        x = util.asarray_arg(name, x)
        _reject_complex(name, x)
        return float_rule(x) if is_inexact_dtype(x.dtype) else x
    return _name(fn, name, f"Element-wise {name} (kiln.numpy); integer inputs are returned unchanged.")


# ---------------------------------------------------------------------------------------------------------
# Arithmetic

def _add(x1, x2):
    return lax.or_(x1, x2) if is_bool_dtype(x1.dtype) else lax.add(x1, x2)


def _subtract(x1, x2):
    if is_bool_dtype(x1.dtype):
        raise TypeError("subtract: boolean subtract (the `-` operator) is not supported; "
                        "use logical_xor (`^`) instead")
    return lax.sub(x1, x2)


def _multiply(x1, x2):
    return lax.and_(x1, x2) if is_bool_dtype(x1.dtype) else lax.mul(x1, x2)


add = _binary("add", _add)
subtract = _binary("subtract", _subtract)
multiply = _binary("multiply", _multiply)
divide = _binary_inexact("divide", lax.div)
true_divide = _binary_inexact("true_divide", lax.div)


def _as_numeric(x1, x2):
    """Bool operands computed on as int32 (JAX's promote_args_numeric: True // True is int32 1)."""
    if is_bool_dtype(x1.dtype):
        return tuple(lax.convert_element_type(v, np.int32) for v in (x1, x2))
    return x1, x2


def _nonzero_divisor(x2):
    """An integer divisor with 0 replaced by 1: JAX's remainder and fmod give 0 for x % 0."""
    return lax.select(lax.eq(x2, _c(x2, 0)), _c(x2, 1), x2)


def _int_floor_divide(x1, x2):
    if x1.dtype.kind == "u":
        return lax.div(x1, x2)
    q = lax.div(x1, x2)  # rounds toward zero
    # JAX compares signs (not x < 0), so x // 0 is lax.div's -1, less one where x != 0
    adjust = lax.and_(lax.ne(lax.sign(x1), lax.sign(x2)), lax.ne(lax.rem(x1, x2), _c(x1, 0)))
    return lax.select(adjust, lax.sub(q, _c(q, 1)), q)


def _float_divmod(x1, x2):
    """(floor(x1/x2), x1 mod x2) the way NumPy computes them, so results agree to the last bit."""
    zero = _c(x1, 0)
    mod = lax.rem(x1, x2)
    div = lax.div(lax.sub(x1, mod), x2)
    fix = lax.and_(lax.ne(mod, zero), lax.ne(lax.lt(x2, zero), lax.lt(mod, zero)))
    mod = lax.select(fix, lax.add(mod, x2), mod)
    one = lax.full_like(div, 1)
    div = lax.select(fix, lax.sub(div, one), div)
    floordiv = lax.floor(div)
    floordiv = lax.select(lax.gt(lax.sub(div, floordiv), _c(div, 0.5)), lax.add(floordiv, one), floordiv)
    # x2 == 0: NumPy gives x1 / 0 (inf or nan) for the quotient and nan for the remainder. The
    # quotient is piecewise constant, so its derivative is 0 as in JAX: floor (which keeps inf and
    # nan) drops x1 / x2's tangent, whose 1 / x2**2 would turn the select's zero into inf or nan.
    x2_zero = lax.eq(x2, zero)
    floordiv = lax.select(x2_zero, lax.floor(lax.div(x1, x2)), floordiv)
    return floordiv, mod


def _floor_divide(x1, x2):
    x1, x2 = _as_numeric(x1, x2)
    if is_int_dtype(x1.dtype):
        return _int_floor_divide(x1, x2)
    return _float_divmod(x1, x2)[0]


def _int_mod(x1, x2):
    x2 = _nonzero_divisor(x2)
    r = lax.rem(x1, x2)
    if x1.dtype.kind == "u":
        return r
    zero = _c(r, 0)
    fix = lax.and_(lax.ne(r, zero), lax.ne(lax.lt(r, zero), lax.lt(x2, zero)))
    return lax.select(fix, lax.add(r, x2), r)


def _mod(x1, x2):
    x1, x2 = _as_numeric(x1, x2)
    if is_int_dtype(x1.dtype):
        return _int_mod(x1, x2)
    return _float_divmod(x1, x2)[1]


floor_divide = _binary("floor_divide", _floor_divide)
remainder = _binary("remainder", _mod)
mod = _binary("mod", _mod)
def _fmod(x1, x2):
    x1, x2 = _as_numeric(x1, x2)
    return lax.rem(x1, _nonzero_divisor(x2) if is_int_dtype(x1.dtype) else x2)


fmod = _binary("fmod", _fmod)


def divmod(x1, x2, /):
    """(floor_divide(x1, x2), mod(x1, x2)) in one call."""
    return floor_divide(x1, x2), remainder(x1, x2)


def _int_power(base, exponent):
    """Integer power as JAX's: repeated squaring over the exponent's 6 low bits (a larger power
    overflows any base but 0 and +-1, which these bits get right), shifted logically, so a negative
    exponent counts as its two's-complement bits (9 ** -3 in int32 is 9 ** 61: 945842025); 0 to
    any nonzero power is 0 (bug, issue 32: kiln gave 0 for every negative exponent)."""
    one, zero = _c(exponent, 1), _c(exponent, 0)
    acc = lax.select(lax.and_(lax.eq(base, _c(base, 0)), lax.ne(exponent, zero)), _c(base, 0), _c(base, 1))
    b, e = base, exponent
    for _ in range(6):
        acc = lax.select(lax.ne(lax.and_(e, one), zero), lax.mul(acc, b), acc)
        b = lax.mul(b, b)
        e = lax.shift_right_logical(e, one)
    return acc


def _static_int_exponent(x2):
    """x2 as a Python int where JAX takes it as a concrete integer scalar power (integer_pow: repeated
    multiplication, the base promoted alone), else None."""
    if isinstance(x2, (int, np.integer, np.bool_)):
        return int(x2)
    if isinstance(x2, (np.ndarray, core.Array)) and not isinstance(x2, core.Tracer) and x2.ndim == 0 \
            and np.dtype(x2.dtype).kind in "iub":
        return int(x2)
    return None


def power(x1, x2, /):
    """x1 ** x2 element-wise with JAX's rules: a concrete integer scalar exponent multiplies repeatedly;
    integer bases with integer exponents stay integers, bools computing as int32; the rest use lax.pow."""
    n = _static_int_exponent(x2)
    if n is not None:
        x1 = util.asarray_arg("power", x1)
        if is_bool_dtype(x1.dtype):
            x1 = lax.convert_element_type(x1, np.int32)
        if n < 0 and not is_inexact_dtype(x1.dtype):
            raise TypeError(f"power: integers cannot be raised to negative integer powers "
                            f"(got {x1.dtype} ** {n}); convert the base to a float first")
        return lax.integer_pow(x1, n)
    # JAX's _power: an inexact base to an integer exponent is lax.pow(x1, x2) on the unpromoted
    # operands, whose result is weak only when both are (a Python float base, an int32 array: strong)
    strong_int_exp = (is_int_dtype(dtypes.dtype_of(x2)) and not dtypes.is_weakly_typed(x2)
                      and is_inexact_dtype(dtypes.dtype_of(x1)))
    x1, x2 = _as_numeric(*util.promote_dtypes("power", x1, x2))
    if strong_int_exp and x1.weak_type:
        x1 = lax.convert_element_type(x1, x1.dtype, False)
    if is_int_dtype(x1.dtype):
        x1, x2 = util.promote_args("power", x1, x2)
        return _int_power(x1, x2)
    # a rank-0 operand stays one (lax.pow broadcasts it), as JAX's jaxpr shows `pow a 3.5:f32[]`:
    # distrax inverts such jaxprs equation by equation
    x1, x2 = util._broadcast_nonscalar("power", [x1, x2])[0]
    return lax.pow(x1, x2)


pow = power


def float_power(x1, x2, /):
    """x1 ** x2 on the promoted inexact dtype, as JAX (not NumPy's float64: float16 stays float16,
    complex stays complex)."""
    return lax.pow(*promote_args_inexact("float_power", x1, x2))


def negative(x, /):
    """-x element-wise."""
    x = util.asarray_arg("negative", x)
    if is_bool_dtype(x.dtype):
        raise TypeError("negative: boolean negative (the `-` operator) is not supported; "
                        "use logical_not (`~`) instead")
    return lax.neg(x)


def positive(x, /):
    """+x element-wise (returns x)."""
    return util.asarray_arg("positive", x)


# ---------------------------------------------------------------------------------------------------------
# Transcendental functions

_LN2 = math.log(2.0)
_LN10 = math.log(10.0)

exp = _unary_inexact("exp", lax.exp)
exp2 = _unary_inexact("exp2", lax.exp2)
expm1 = _unary_inexact("expm1", lax.expm1)
log = _unary_inexact("log", lax.log)
log2 = _unary_inexact("log2", lambda x: lax.div(lax.log(x), _c(x, _LN2)))
log10 = _unary_inexact("log10", lambda x: lax.div(lax.log(x), _c(x, _LN10)))
log1p = _unary_inexact("log1p", lax.log1p)
sin = _unary_inexact("sin", lax.sin)
cos = _unary_inexact("cos", lax.cos)
tan = _unary_inexact("tan", lax.tan)
arcsin = asin = _unary_inexact("arcsin", lax.asin)
arccos = acos = _unary_inexact("arccos", lax.acos)
arctan = atan = _unary_inexact("arctan", lax.atan)
sinh = _unary_inexact("sinh", lax.sinh)
cosh = _unary_inexact("cosh", lax.cosh)
tanh = _unary_inexact("tanh", lax.tanh)
arcsinh = asinh = _unary_inexact("arcsinh", lax.asinh)
arccosh = acosh = _unary_inexact("arccosh", lax.acosh)
arctanh = atanh = _unary_inexact("arctanh", lax.atanh)
sqrt = _unary_inexact("sqrt", lax.sqrt)
cbrt = _unary_inexact("cbrt", lax.cbrt)


def square(x, /):
    """x * x element-wise (dtype kept; bools compute as int32, as JAX's promote_dtypes_numeric)."""
    x = util.asarray_arg("square", x)
    _reject_complex("square", x)
    if is_bool_dtype(x.dtype):
        x = lax.convert_element_type(x, np.int32)
    return lax.square(x)


# The constants of reciprocal, imag, angle and floor_divide keep a weak operand's result weak, as JAX's
# integer_pow, full_like and Python-scalar constants do there (bug, issue 32: x // 2.0 of an int8 array
# was strong); elsewhere JAX's constants are strong and so are kiln's (_c).
reciprocal = _unary_inexact("reciprocal", lambda x: lax.div(lax.full_like(x, 1), x))
deg2rad = radians = _unary_inexact("deg2rad", lambda x: lax.mul(x, _c(x, math.pi / 180)))
rad2deg = degrees = _unary_inexact("rad2deg", lambda x: lax.mul(x, _c(x, 180 / math.pi)))
arctan2 = atan2 = _binary_inexact("arctan2", lax.atan2)


def _hypot(x1, x2):
    """big sqrt(1 + (small / big)^2), JAX's formula, so its gradient too: at (0, 0) big's max splits the
    tangent and big itself (not 0) is returned, giving 1/2 to each operand as JAX does."""
    x1, x2 = lax.abs(x1), lax.abs(x2)
    big, small = lax.max(x1, x2), lax.min(x1, x2)
    zero = _c(big, 0)
    big_zero = lax.eq(big, zero)
    ratio = lax.div(small, lax.select(big_zero, _c(big, 1), big))
    r = lax.select(big_zero, big, lax.mul(big, lax.sqrt(lax.add(_c(ratio, 1), lax.mul(ratio, ratio)))))
    either_inf = lax.or_(lax.eq(x1, _c(x1, np.inf)), lax.eq(x2, _c(x2, np.inf)))
    return lax.select(either_inf, _c(r, np.inf), r)


hypot = _binary_inexact("hypot", _hypot)


def _wrap_between(x, a):
    """x wrapped into [-a, a) (JAX's rule for the imaginary part of a complex logaddexp)."""
    r = lax.rem(lax.add(x, _c(x, a)), _c(x, 2 * a))
    return lax.sub(lax.select(lax.lt(r, _c(r, 0)), lax.add(r, _c(r, 2 * a)), r), _c(r, a))


def _replace_inf(x):
    """x with +inf (in the real part) replaced by 0: exp(x - out) of JAX's logaddexp JVP is then 1."""
    re = lax.real(x) if is_complex_dtype(x.dtype) else x
    return lax.select(lax.eq(re, _c(re, math.inf)), _c(x, 0), x)


def _logaddexp_rule(exp_rule, log_scale):
    def value(x1, x2):
        amax = lax.max(x1, x2)  # complex: lexicographic, as JAX
        if is_complex_dtype(x1.dtype):  # JAX's formula: amax + log1p(exp(x1 + x2 - 2 amax))
            tail = lax.log1p(exp_rule(lax.sub(lax.add(x1, x2), lax.mul(amax, _c(amax, 2)))))
            if log_scale != 1.0:
                tail = lax.div(tail, _c(tail, log_scale))
            out = lax.add(amax, tail)
            return lax.complex(lax.real(out), _wrap_between(lax.imag(out), math.pi / log_scale))
        delta = lax.sub(x1, x2)
        tail = lax.log1p(exp_rule(lax.neg(lax.abs(delta))))
        if log_scale != 1.0:
            tail = lax.div(tail, _c(tail, log_scale))
        # delta is nan for equal infinities (and for nan inputs): x1 + x2 gives the right answer there.
        return lax.select(lax.ne(delta, delta), lax.add(x1, x2), lax.add(amax, tail))

    def jvp(primals, tangents):
        # JAX's rule: t1 exp(x1 - out) + t2 exp(x2 - out) (exp2 for logaddexp2), not the derivative of
        # the formula above, whose |x1 - x2| has a kink where x1 == x2
        (x1, x2), (t1, t2) = primals, tangents
        out = made[0](x1, x2)
        share = [exp_rule(lax.sub(_replace_inf(x), _replace_inf(out))) for x in (x1, x2)]
        return out, lax.add(lax.mul(t1, share[0]), lax.mul(t2, share[1]))

    made = [None]  # the custom_jvp function, made on first use (kiln._src.custom is imported lazily)

    def rule(x1, x2):
        if made[0] is None:
            from kiln._src.custom import custom_jvp
            made[0] = custom_jvp(value)
            made[0].defjvp(jvp)
        return made[0](x1, x2)
    return rule


logaddexp = _binary_inexact("logaddexp", _logaddexp_rule(lax.exp, 1.0))
logaddexp2 = _binary_inexact("logaddexp2", _logaddexp_rule(lax.exp2, _LN2))


def _sinc_at_zero_impl(k, x):
    """The k-th derivative of sin(y)/y at y = 0, shaped like x: 0 for odd k, (-1)^(k/2) / (k + 1)."""
    v = 0.0 if k % 2 else (-1.0) ** (k // 2) / (k + 1)
    return lax.full_like(x, v)


def _sinc_at_zero_jvp(k, primals, tangents):
    (x,), (t,) = primals, tangents
    return _sinc_at_zero(k, x), lax.mul(_sinc_at_zero(k + 1, x), t)


_sinc_at_zero = None  # made on first use (custom_jvp lives in kiln._src.custom, imported lazily)


def _sinc(x):
    """sin(pi x) / (pi x), 1 at 0, with every derivative right at 0 too (JAX's Maclaurin rule)."""
    global _sinc_at_zero
    if _sinc_at_zero is None:
        from kiln._src.custom import custom_jvp
        _sinc_at_zero = custom_jvp(_sinc_at_zero_impl, nondiff_argnums=(0,))
        _sinc_at_zero.defjvp(_sinc_at_zero_jvp)
    zero = lax.eq(x, _c(x, 0))
    px = lax.mul(x, _c(x, math.pi))
    safe = lax.select(zero, _c(x, 1), px)
    return lax.select(zero, _sinc_at_zero(0, px), lax.div(lax.sin(safe), safe))


sinc = _unary_inexact("sinc", _sinc)


# ---------------------------------------------------------------------------------------------------------
# Absolute value, sign, rounding

def absolute(x, /):
    """|x| element-wise (bool and unsigned inputs are returned unchanged)."""
    x = util.asarray_arg("absolute", x)
    if is_bool_dtype(x.dtype) or x.dtype.kind == "u":
        return x
    return lax.abs(x)


abs = absolute
fabs = _unary_inexact("fabs", lax.abs)


def sign(x, /):
    """-1, 0 or 1 by the sign of x (nan stays nan); bool inputs are rejected as by NumPy."""
    x = util.asarray_arg("sign", x)
    if is_bool_dtype(x.dtype):
        raise TypeError("sign: bool inputs are not supported; convert to an integer dtype first")
    if x.dtype.kind == "u":
        return lax.convert_element_type(lax.gt(x, _c(x, 0)), x.dtype)
    return lax.sign(x)


def _trunc(x):
    return lax.select(lax.lt(x, _c(x, 0)), lax.ceil(x), lax.floor(x))


floor = _unary_keep_int("floor", lax.floor)
ceil = _unary_keep_int("ceil", lax.ceil)
trunc = _unary_keep_int("trunc", _trunc)
fix = _unary_keep_int("fix", _trunc)
def rint(x, /):
    """Rounds half to even; bool and integer inputs become the default float (float64 under x64, JAX's
    rule for rint, not sqrt's int32 -> float32), complex numbers round each part."""
    x = util.asarray_arg("rint", x)
    if is_bool_dtype(x.dtype) or is_int_dtype(x.dtype):
        return lax.convert_element_type(x, dtypes.default_float_dtype())
    if is_complex_dtype(x.dtype):
        return _per_part(lambda part: lax.round(part, 1))(x)
    return lax.round(x, 1)


def _round_int(x, decimals):
    """Rounds integers to a negative number of decimals, half to even, exactly in integer arithmetic."""
    factor = 10 ** (-decimals)
    if factor > np.iinfo(x.dtype).max:
        return lax.full(x.shape, 0, x.dtype)
    f = _c(x, factor)
    q = _int_floor_divide(x, f)
    r = lax.sub(x, lax.mul(q, f))  # 0 <= r < factor
    twice = lax.mul(r, _c(r, 2)) if factor <= np.iinfo(x.dtype).max // 2 else None
    if twice is None:  # 2r could overflow: compare r with factor - r instead
        up = lax.or_(lax.gt(r, lax.sub(f, r)),
                     lax.and_(lax.eq(r, lax.sub(f, r)), lax.ne(lax.and_(q, _c(q, 1)), _c(q, 0))))
    else:
        up = lax.or_(lax.gt(twice, f),
                     lax.and_(lax.eq(twice, f), lax.ne(lax.and_(q, _c(q, 1)), _c(q, 0))))
    q = lax.select(up, lax.add(q, _c(q, 1)), q)
    return lax.mul(q, f)


def round(a, decimals=0, out=None):
    """Rounds half to even to `decimals` decimal places (negative decimals round to tens, hundreds...);
    complex numbers round each part."""
    util.check_no_out("round", out)
    decimals = util.concrete_int(decimals, "round: decimals")
    a = util.asarray_arg("round", a)
    if is_bool_dtype(a.dtype) or (is_int_dtype(a.dtype) and decimals >= 0):
        return a
    if is_int_dtype(a.dtype):
        return _round_int(a, decimals)
    if is_complex_dtype(a.dtype):
        return _per_part(lambda part: _round_float(part, decimals))(a)
    return _round_float(a, decimals)


def _round_float(a, decimals):
    if decimals == 0:
        return lax.round(a, 1)
    if decimals > 0:
        factor = _c(a, 10.0 ** decimals)
        return lax.div(lax.round(lax.mul(a, factor), 1), factor)
    factor = _c(a, 10.0 ** (-decimals))
    return lax.mul(lax.round(lax.div(a, factor), 1), factor)


around = round_ = round


# ---------------------------------------------------------------------------------------------------------
# Minimum / maximum / clip / where

minimum = _binary("minimum", lambda a, b: lax.and_(a, b) if is_bool_dtype(a.dtype) else lax.min(a, b))
maximum = _binary("maximum", lambda a, b: lax.or_(a, b) if is_bool_dtype(a.dtype) else lax.max(a, b))


def _fminmax(wins, bool_rule, int_rule):
    """JAX's fmin/fmax: x1 where it wins strictly or x2 is NaN, else x2 (a tie gives x2 the whole
    gradient and the value's zero sign; NaN only when both are)."""
    def rule(a, b):
        if is_bool_dtype(a.dtype):
            return bool_rule(a, b)
        if not is_inexact_dtype(a.dtype):
            return int_rule(a, b)
        return lax.select(lax.or_(wins(a, b), lax.ne(b, b)), a, b)
    return rule


fmin = _binary("fmin", _fminmax(lambda a, b: order_lt(a, b), lax.and_, lax.min))
fmax = _binary("fmax", _fminmax(lambda a, b: order_gt(a, b), lax.or_, lax.max))


def clip(a, a_min=None, a_max=None, *, min=None, max=None):
    """Limits `a` to [min, max]; either bound may be None. `a_min`/`a_max` are NumPy's older names.
    Complex values raise ValueError, as in JAX (they have no order to clip by)."""
    if a_min is not None and min is not None:
        raise TypeError("clip: pass the lower bound once, as a_min (second positional) or min=")
    if a_max is not None and max is not None:
        raise TypeError("clip: pass the upper bound once, as a_max (third positional) or max=")
    lo = min if a_min is None else a_min
    hi = max if a_max is None else a_max
    out = util.asarray_arg("clip", a)
    if any(v is not None and np.dtype(dtypes.dtype_of(v)).kind == "c" for v in (out, lo, hi)):
        raise ValueError("clip: complex values have no ordering and cannot be clipped; clip their real "
                         "or imaginary parts (real, imag) instead")
    if lo is not None:
        out = maximum(out, lo)
    if hi is not None:
        out = minimum(out, hi)
    return out


def where(condition, x=None, y=None, /, *, size=None, fill_value=None):
    """Picks x where `condition` is true, else y (broadcasting all three).

    The one-argument form (= nonzero) needs concrete input since its shape depends on the values.
    """
    if x is None and y is None:
        cond = util.asarray_arg("where", condition)
        if size is not None:  # = nonzero(condition, size=..., fill_value=...), as JAX
            from kiln._src.numpy.shape_ops import nonzero
            return nonzero(cond, size=size, fill_value=fill_value)
        value = core.concrete_or_error(
            cond, "where(condition) with one argument, whose output shape depends on the values of "
                  "`condition` (use the three-argument form where(condition, x, y) under jit)")
        return tuple(core.asarray(i.astype(np.dtype(dtypes.default_int_dtype())))
                     for i in np.nonzero(np.asarray(value)))
    if x is None or y is None:
        raise TypeError("where: either both x and y or neither must be given")
    if getattr(x, "_is_key_array", False) or getattr(y, "_is_key_array", False):
        return _where_keys(condition, x, y)
    cond = _to_bool(util.asarray_arg("where", condition))
    x, y = util.promote_dtypes("where", x, y)
    cond, x, y = util._broadcast_all("where", [cond, x, y], rank_promotion=False)
    return lax.select(cond, x, y)


def _where_keys(condition, x, y):
    """where over typed PRNG key arrays (as JAX's): the key data picked word by word."""
    from kiln import random
    if not (getattr(x, "_is_key_array", False) and getattr(y, "_is_key_array", False)) or x.dtype != y.dtype:
        raise TypeError(f"where: typed PRNG keys are picked only among keys of one kind, got {x.dtype} and "
                        f"{getattr(y, 'dtype', type(y).__name__)}")
    cond = _to_bool(util.asarray_arg("where", condition))
    shape = util.broadcast_shapes(tuple(cond.shape), tuple(x.shape), tuple(y.shape), opname="where")
    k = x._data.shape[-1]
    full = tuple(shape) + (k,)
    pick = util.broadcast_to_shape(lax.expand_dims(cond, (cond.ndim,)), tuple(shape) + (1,), "where")
    return random.PRNGKeyArray(lax.select(util.broadcast_to_shape(pick, full, "where"),
                                          util.broadcast_to_shape(x._data, full, "where"),
                                          util.broadcast_to_shape(y._data, full, "where")))


# ---------------------------------------------------------------------------------------------------------
# Classification

def _classify(name, float_rule, int_value):
    def fn(x, /):
        x = util.asarray_arg(name, x)
        _reject_complex(name, x)
        if is_complex_dtype(x.dtype):  # (isnan, isinf, isfinite: _REAL_ONLY names raised above)
            re, im = lax.real(x), lax.imag(x)
            return (lax.and_ if name == "isfinite" else lax.or_)(float_rule(re), float_rule(im))
        if is_inexact_dtype(x.dtype):
            return float_rule(x)
        if callable(int_value):
            return int_value(x)
        return lax.full(x.shape, int_value, np.bool_)
    return _name(fn, name, f"Element-wise {name} test (kiln.numpy), returning bool.")


def _signbit_float(x):
    zero = _c(x, 0)
    # -0.0 has its sign bit set: 1 / -0.0 is -inf. (The sign of a nan cannot be read without a bitcast.)
    neg_zero = lax.and_(lax.eq(x, zero), lax.lt(lax.div(_c(x, 1), x), zero))
    return lax.or_(lax.lt(x, zero), neg_zero)


isnan = _classify("isnan", lambda x: lax.ne(x, x), False)
isinf = _classify("isinf", lambda x: lax.eq(lax.abs(x), _c(x, np.inf)), False)
isfinite = _classify("isfinite", lax.is_finite, True)
isposinf = _classify("isposinf", lambda x: lax.eq(x, _c(x, np.inf)), False)
isneginf = _classify("isneginf", lambda x: lax.eq(x, _c(x, -np.inf)), False)
signbit = _classify("signbit", _signbit_float,
                    lambda x: lax.lt(x, _c(x, 0)) if x.dtype.kind == "i" else lax.full(x.shape, False, np.bool_))


def nan_to_num(x, copy=True, nan=0.0, posinf=None, neginf=None):
    """Replaces nan by `nan`, +inf by `posinf` (default: the dtype's max) and -inf by `neginf`."""
    del copy
    x = util.asarray_arg("nan_to_num", x)
    if not is_inexact_dtype(x.dtype):
        return x
    if is_complex_dtype(x.dtype):  # each part on its own, as JAX
        return _per_part(lambda part: nan_to_num(part, nan=nan, posinf=posinf, neginf=neginf))(x)
    info = dtypes.finfo(x.dtype)
    posinf = float(info.max) if posinf is None else posinf
    neginf = float(info.min) if neginf is None else neginf
    out = lax.select(lax.ne(x, x), _c(x, nan), x)
    out = lax.select(lax.eq(out, _c(x, np.inf)), _c(x, posinf), out)
    return lax.select(lax.eq(out, _c(x, -np.inf)), _c(x, neginf), out)


def copysign(x1, x2, /):
    """|x1| with the sign of x2 (floats; integer inputs are promoted)."""
    x1, x2 = promote_args_inexact("copysign", x1, x2)
    _reject_complex("copysign", x1)
    magnitude = lax.abs(x1)
    return lax.select(_signbit_float(x2), lax.neg(magnitude), magnitude)


def heaviside(x1, x2, /):
    """Step function: 0 where x1 < 0, x2 where x1 == 0, 1 where x1 > 0."""
    x1_scalar = np.ndim(x1) == 0
    x1, x2 = promote_args_inexact("heaviside", x1, x2)
    _reject_complex("heaviside", x1)
    # JAX's constants: Python scalars for a weak 0-d x1, else strong 0-d arrays of its dtype; so the
    # result is weak when x1 is a weak scalar and x2 is weak (bug, issue 32: kiln's was never weak)
    zero, one = (0.0, 1.0) if x1.weak_type and x1_scalar else (_c(x1, 0), _c(x1, 1))
    at_zero = where(lax.ne(x1, x1), x1, x2)  # NaN stays NaN, as in JAX and NumPy
    return where(lax.lt(x1, _c(x1, 0)), zero, where(lax.gt(x1, _c(x1, 0)), one, at_zero))


# ---------------------------------------------------------------------------------------------------------
# Logical, bitwise, comparison

logical_and = _binary_logical("logical_and", lax.and_)
logical_or = _binary_logical("logical_or", lax.or_)
logical_xor = _binary_logical("logical_xor", lax.xor)


def logical_not(x, /):
    """Element-wise not; nonzero counts as True."""
    return lax.not_(_to_bool(util.asarray_arg("logical_not", x)))


bitwise_and = _binary_integer("bitwise_and", lax.and_)
bitwise_or = _binary_integer("bitwise_or", lax.or_)
bitwise_xor = _binary_integer("bitwise_xor", lax.xor)


def _shift_right(x1, x2):
    return (lax.shift_right_arithmetic if x1.dtype.kind == "i" else lax.shift_right_logical)(x1, x2)


def _shift(name, rule):
    def shift_rule(x1, x2):
        if is_bool_dtype(x1.dtype):  # bools shift as the default int (JAX's numeric promotion)
            x1, x2 = (lax.convert_element_type(v, dtypes.default_int_dtype()) for v in (x1, x2))
        return rule(x1, x2)
    return _binary_integer(name, shift_rule)


left_shift = bitwise_left_shift = _shift("left_shift", lax.shift_left)
right_shift = bitwise_right_shift = _shift("right_shift", _shift_right)


def invert(x, /):
    """Bitwise not (logical not for bool)."""
    x = util.asarray_arg("invert", x)
    if not (is_int_dtype(x.dtype) or is_bool_dtype(x.dtype)):
        raise TypeError(f"invert: only integer and bool inputs are supported, got {x.dtype}")
    return lax.not_(x)


bitwise_not = bitwise_invert = invert

_equal = _binary("equal", lax.eq)
_not_equal = _binary("not_equal", lax.ne)


def _is_key(x):
    from kiln import random as _random
    return isinstance(x, _random.PRNGKeyArray)


def equal(x1, x2, /):
    """x1 == x2 element-wise (typed PRNG keys compare by their key data, as JAX's)."""
    return x1 == x2 if _is_key(x1) or _is_key(x2) else _equal(x1, x2)


def not_equal(x1, x2, /):
    """x1 != x2 element-wise (typed PRNG keys compare by their key data, as JAX's)."""
    return x1 != x2 if _is_key(x1) or _is_key(x2) else _not_equal(x1, x2)
def _ordered(strict, weak):
    """A comparison; complex operands compare lexicographically (real parts first), as JAX."""
    def rule(a, b):
        if a.dtype.kind != "c":
            return weak(a, b)
        ar, ai, br, bi = lax.real(a), lax.imag(a), lax.real(b), lax.imag(b)
        return lax.or_(strict(ar, br), lax.and_(lax.eq(ar, br), weak(ai, bi)))
    return rule


# The comparison rules on operands of one dtype, complex ones in JAX's order (kiln.nn's piecewise
# activations compare with these).
order_lt, order_le = _ordered(lax.lt, lax.lt), _ordered(lax.lt, lax.le)
order_gt, order_ge = _ordered(lax.gt, lax.gt), _ordered(lax.gt, lax.ge)
less = _binary("less", order_lt)
less_equal = _binary("less_equal", order_le)
greater = _binary("greater", order_gt)
greater_equal = _binary("greater_equal", order_ge)


# ---------------------------------------------------------------------------------------------------------
# Complex parts

def conjugate(x, /):
    """Complex conjugate; the identity on real inputs."""
    x = util.asarray_arg("conjugate", x)
    return lax.conj(x) if is_complex_dtype(x.dtype) else x


conj = conjugate


def real(val, /):
    """Real part; the identity on real inputs."""
    x = util.asarray_arg("real", val)
    return lax.real(x) if is_complex_dtype(x.dtype) else x


def imag(val, /):
    """Imaginary part; zeros on real inputs."""
    x = util.asarray_arg("imag", val)
    return lax.imag(x) if is_complex_dtype(x.dtype) else lax.full_like(x, 0)


def angle(z, deg=False):
    """The argument of z (atan2(imag, real)); in degrees when deg is True. Real inputs give 0 or pi."""
    x = util.asarray_arg("angle", z)
    re, im = (lax.real(x), lax.imag(x)) if is_complex_dtype(x.dtype) else (x, lax.full_like(x, 0))
    if not is_inexact_dtype(re.dtype) or (x.dtype.kind == "f" or x.dtype == dtypes.bfloat16) and x.ndim == 0:
        # JAX's rule: the default float (float64 under x64) for integers, bools and real scalars
        dt = dtypes.default_float_dtype()
        re, im = lax.convert_element_type(re, dt), lax.convert_element_type(im, dt)
    out = lax.atan2(im, re)
    return lax.mul(out, _c(out, 180 / math.pi)) if deg else out


def iscomplexobj(x):
    """Whether x has a complex dtype (not whether any value has a nonzero imaginary part)."""
    dt = getattr(x, "dtype", None)
    if dt is None:
        return isinstance(x, complex) or (isinstance(x, (list, tuple)) and dtypes.dtype_of(x).kind == "c")
    try:
        return np.dtype(dt).kind == "c"
    except TypeError:  # an extended dtype (typed keys): not complex
        return False


def isrealobj(x):
    """Whether x has a non-complex dtype."""
    return not iscomplexobj(x)


def iscomplex(x, /):
    """Element-wise: whether the imaginary part is nonzero."""
    x = util.asarray_arg("iscomplex", x)
    if not is_complex_dtype(x.dtype):
        return lax.full(x.shape, False, np.bool_)
    return lax.ne(lax.imag(x), _c(lax.imag(x), 0))


def isreal(x, /):
    """Element-wise: whether the imaginary part is zero."""
    return logical_not(iscomplex(x))


# ---------------------------------------------------------------------------------------------------------
# gcd / lcm: Euclid's algorithm unrolled for the worst case of the dtype (consecutive Fibonacci numbers)

def _euclid_steps(dtype):
    limit, a, b, steps = np.iinfo(dtype).max, 1, 1, 0
    while b <= limit:
        a, b, steps = b, a + b, steps + 1
    return steps + 1


def _gcd(x1, x2):
    a, b = absolute(x1), absolute(x2)
    zero = _c(a, 0)
    for _ in range(_euclid_steps(a.dtype)):
        b_zero = lax.eq(b, zero)
        safe_b = lax.select(b_zero, _c(b, 1), b)
        a, b = lax.select(b_zero, a, b), lax.select(b_zero, zero, lax.rem(a, safe_b))
    return a


def _integer_only(name, rule):
    def checked(x1, x2):
        if not is_int_dtype(x1.dtype):
            raise TypeError(f"{name}: only integer inputs are supported, got {x1.dtype}")
        return rule(x1, x2)
    return checked


def _lcm(x1, x2):
    g = _gcd(x1, x2)
    zero = _c(g, 0)
    safe_g = lax.select(lax.eq(g, zero), _c(g, 1), g)
    return lax.select(lax.eq(g, zero), zero, absolute(lax.mul(lax.div(x1, safe_g), x2)))


gcd = _binary("gcd", _integer_only("gcd", _gcd))
lcm = _binary("lcm", _integer_only("lcm", _lcm))
