"""Clean transformed programs: after jvp/vjp, kiln simplifies the program (transforms/simplify.c:
x*1, neg(neg x), identity converts and reshapes..., then CSE and DCE) before it is inlined or
compiled, so make_jaxpr(grad(f)) shows no seed multiplications by 1, no integer_pow[y=1], no
identity convert. These tests pin the equation counts of typical programs and check that the
simplified programs compute bit-identical results to the unsimplified ones
(KILN_DISABLE_SIMPLIFY=1) and the right numbers (NumPy float64 / finite differences)."""

import re

import numpy as np
import pytest

import kiln
import kiln.numpy as jnp
from kiln import lax


# ---- reading make_jaxpr text ----

def _split_eqn(line):
    """'c:f32[3] = mul a b' -> (['c'], {'c': 'f32[3]'}, 'mul', 'params text', ['a', 'b'])."""
    lhs, rhs = line.strip().split(" = ", 1)
    types = {}
    for tok in lhs.split():
        name, ty = tok.split(":", 1)
        types[name] = ty
    m = re.match(r"([a-z_]+)", rhs)
    prim = m.group(1)
    rest = rhs[m.end():]
    params = ""
    if rest.startswith("["):
        depth = 0
        for i, ch in enumerate(rest):
            depth += ch == "["
            depth -= ch == "]"
            if depth == 0:
                params, rest = rest[1:i], rest[i + 1:]
                break
    return list(types), types, prim, params, rest.split()


def _parse(jaxpr):
    """Equations of a make_jaxpr result, and the type text of every variable."""
    text = str(jaxpr)
    header = text.splitlines()[0]
    types = {}
    for tok in header.split(";", 1)[1].split(".")[0].split():
        if ":" in tok:
            name, ty = tok.split(":", 1)
            types[name] = ty
    eqns = []
    for line in str(jaxpr).splitlines()[1:-1]:
        outs, tys, prim, params, ins = _split_eqn(line)
        types.update(tys)
        eqns.append((outs, prim, params, ins))
    return eqns, types


def _ones(eqns):
    """Variables that are a literal 1 or a broadcast/reshape of one."""
    ones = set()
    for outs, prim, params, ins in eqns:
        if prim == "literal" and re.search(r"\bvalue=1\b", params) and "float" in params:
            ones.add(outs[0])
        if prim == "literal" and re.search(r"\bint_value=1\b", params) and "float" not in params:
            ones.add(outs[0])
        if prim in ("broadcast_in_dim", "reshape", "transpose") and ins and ins[0] in ones:
            ones.add(outs[0])
    return ones


def _leftovers(jaxpr):
    """The simplifications a clean program must not leave behind."""
    eqns, types = _parse(jaxpr)
    ones = _ones(eqns)
    bad = []
    for outs, prim, params, ins in eqns:
        if prim == "integer_pow" and params.strip() == "y=1":
            bad.append("integer_pow[y=1]")
        if prim in ("mul",) and any(v in ones for v in ins):
            bad.append(f"mul by 1: {outs[0]}")
        if prim == "div" and ins[1] in ones:
            bad.append(f"div by 1: {outs[0]}")
        if prim == "convert_element_type" and types.get(ins[0]) == types.get(outs[0]):
            bad.append(f"identity convert: {outs[0]}")
        if prim == "neg" and any(o2 == ins[0] and p2 == "neg" for o2s, p2, _, _ in eqns for o2 in o2s):
            bad.append(f"neg of neg: {outs[0]}")
    return bad


def _unsimplified(monkeypatch, fn, *args):
    with monkeypatch.context() as m:
        m.setenv("KILN_DISABLE_SIMPLIFY", "1")
        return fn(*args)


def _bits(x):
    a = np.asarray(x)
    return a.view(np.dtype(f"u{a.dtype.itemsize}"))


def _assert_bit_identical(got, want):
    """Bit-identical except for NaN payloads (a GPU's arithmetic NaN differs from a NaN literal's
    bits, and neither JAX nor IEEE fixes them): NaNs must sit at the same places."""
    for g, w in zip(kiln.tree_util.tree_leaves(got), kiln.tree_util.tree_leaves(want)):
        assert np.asarray(g).dtype == np.asarray(w).dtype and np.asarray(g).shape == np.asarray(w).shape
        gn, wn = np.asarray(g), np.asarray(w)
        if gn.dtype.kind == "f":
            np.testing.assert_array_equal(np.isnan(gn), np.isnan(wn))
            gn, wn = np.where(np.isnan(gn), 0, gn).astype(gn.dtype), np.where(np.isnan(wn), 0, wn).astype(wn.dtype)
        np.testing.assert_array_equal(_bits(gn), _bits(wn))


# ---- the typical cases ----

def _mlp_loss(params, x):
    w1, w2 = params
    h = jnp.tanh(x @ w1)
    y = jnp.tanh(h @ w2)
    return jnp.mean((y - 1.0) ** 2)


def _poly(x):
    return x ** 3 + 2 * x ** 2 + 3 * x + 1


def _cases(rng):
    x = jnp.asarray(rng.standard_normal(5).astype(np.float32))
    w1 = jnp.asarray(rng.standard_normal((3, 4)).astype(np.float32))
    w2 = jnp.asarray(rng.standard_normal((4, 2)).astype(np.float32))
    xb = jnp.asarray(rng.standard_normal((6, 3)).astype(np.float32))
    a = jnp.asarray(rng.standard_normal((3, 4)).astype(np.float32))
    b = jnp.asarray(rng.standard_normal(4).astype(np.float32))
    t = jnp.asarray(rng.standard_normal(5).astype(np.float32))
    return {
        # name: (function, args, equations without the simplifier (make_jaxpr still runs CSE+DCE), with it)
        "grad sum(x*x)": (kiln.grad(lambda x: jnp.sum(x * x)), (x,), 4, 1),
        "grad sum(sin x)": (kiln.grad(lambda x: jnp.sum(jnp.sin(x))), (x,), 4, 1),
        "grad mlp": (kiln.grad(_mlp_loss), ((w1, w2), xb), 21, 21),  # weight gradients need no transpose; mean is one div
        # the outer product of broadcast(1) with b stays: BLAS gives +0.0 for 1 * -0.0, so
        # replacing it by a broadcast of b would not be bit-identical
        "grad dot": (kiln.grad(lambda a, b: jnp.sum(jnp.dot(a, b)), argnums=(0, 1)), (a, b), 4, 4),
        "jvp poly": (lambda x, t: kiln.jvp(_poly, (x,), (t,)), (x, t), 18, 18),
        "grad sum(x**1)": (kiln.grad(lambda x: jnp.sum(lax.integer_pow(x, 1))), (x,), 2, 2),
        "grad sum(x**2)": (kiln.grad(lambda x: jnp.sum(x ** 2)), (x,), 5, 2),
        "grad reshape/transpose/astype": (
            kiln.grad(lambda x: jnp.sum(x.reshape(2, 3).T.astype(jnp.float32) * 2.0)),
            (jnp.asarray(rng.standard_normal(6).astype(np.float32)),), 6, 2),
        "grad grad sin": (kiln.grad(kiln.grad(jnp.sin)), (jnp.float32(0.7),), 5, 2),
    }


@pytest.mark.parametrize("name", list(_cases(np.random.default_rng(0))))
def test_equation_counts_before_and_after(name, monkeypatch):
    fn, args, before, after = _cases(np.random.default_rng())[name]
    got_before = _unsimplified(monkeypatch, lambda: kiln.make_jaxpr(fn)(*args).num_eqns)
    jaxpr = kiln.make_jaxpr(fn)(*args)
    assert (got_before, jaxpr.num_eqns) == (before, after), str(jaxpr)
    assert _leftovers(jaxpr) == [], str(jaxpr)


def test_unsimplified_programs_do_have_the_leftovers(monkeypatch):
    # guards the detector in _leftovers: without the simplifier the seed multiplication by 1
    # and the integer_pow[y=1] are there (kiln.lax never emits an identity convert itself; the
    # C test covers that rule)
    x = jnp.ones(3, jnp.float32)
    f = kiln.grad(lambda x: jnp.sum(lax.integer_pow(x, 1) * jnp.sin(x)))
    jaxpr = _unsimplified(monkeypatch, lambda: kiln.make_jaxpr(f)(x))
    bad = _leftovers(jaxpr)
    assert "integer_pow[y=1]" in bad
    assert any(b.startswith("mul by 1") for b in bad)
    assert _leftovers(kiln.make_jaxpr(f)(x)) == []


def test_grad_sum_x_squared_is_x_plus_x():
    # the seed broadcast(1) * x disappears twice, CSE merges the two products, and make_jaxpr
    # drops the forward pass grad does not return: the whole program is 2x = x + x
    eqns, _ = _parse(kiln.make_jaxpr(kiln.grad(lambda x: jnp.sum(x * x)))(jnp.ones(4)))
    prims = [p for _, p, _, _ in eqns]
    assert prims == ["add"]


@pytest.mark.parametrize("name", list(_cases(np.random.default_rng(0))))
def test_results_bit_identical_to_unsimplified(name, monkeypatch):
    fn, args, _, _ = _cases(np.random.default_rng())[name]
    want = _unsimplified(monkeypatch, fn, *args)
    _assert_bit_identical(fn(*args), want)
    _assert_bit_identical(kiln.jit(fn)(*args), want)


def test_special_values_keep_their_bits(monkeypatch):
    # -0.0 must stay -0.0 (x*1 and x+(-0.0) are exact; x+0.0 would not be), NaN and inf pass
    x = jnp.asarray(np.array([-0.0, 0.0, np.inf, -np.inf, np.nan, -1.5], np.float32))
    for f in (lambda x: jnp.sum(x * x), lambda x: jnp.sum(jnp.sin(x)), lambda x: jnp.sum(x * 1.0 - 0.0),
              lambda x: jnp.sum(-(-x)) + jnp.sum(x / 1.0)):
        g = kiln.grad(f)
        _assert_bit_identical(g(x), _unsimplified(monkeypatch, g, x))
        _assert_bit_identical(kiln.jit(g)(x), _unsimplified(monkeypatch, kiln.jit(g), x))
    g = kiln.grad(lambda x: jnp.sum(x * x))(x)
    assert np.signbit(np.asarray(g)[0]) and not np.signbit(np.asarray(g)[1])


def test_jit_adding_positive_zero_still_clears_negative_zero():
    # regression guard: x + 0.0 must not be simplified to x on floats (-0.0 + 0.0 = +0.0)
    x = jnp.asarray(np.array([-0.0, 2.0], np.float32))
    out = np.asarray(kiln.jit(lambda x: x + 0.0)(x))
    assert not np.signbit(out[0]) and out[1] == 2.0
    out = np.asarray(kiln.jit(lambda x: x * 1.0)(x))
    assert np.signbit(out[0])


def test_jit_float_times_zero_keeps_nan():
    # x*0 folds only for integers: inf*0 and nan*0 are NaN
    x = jnp.asarray(np.array([np.inf, np.nan, -2.0], np.float32))
    out = np.asarray(kiln.jit(lambda x: x * 0.0)(x))
    assert np.isnan(out[0]) and np.isnan(out[1]) and out[2] == 0.0 and np.signbit(out[2])
    xi = jnp.asarray(np.array([5, -7, 2 ** 31 - 1], np.int32))
    np.testing.assert_array_equal(np.asarray(kiln.jit(lambda x: x * 0)(xi)), np.zeros(3, np.int32))
    assert kiln.jit(lambda x: x * 0)(xi).dtype == np.int32


def test_jit_identity_programs_return_the_input_values():
    # after simplification the program's output is its input (or a broadcast of it)
    x = jnp.asarray(np.random.default_rng().standard_normal((2, 3)).astype(np.float32))
    for f in (lambda x: x * 1.0, lambda x: -(-x), lambda x: x.astype(jnp.float32),
              lambda x: x.reshape(6).reshape(2, 3), lambda x: x.T.T, lambda x: lax.integer_pow(x, 1)):
        out = kiln.jit(f)(x)
        assert out.shape == (2, 3) and out.dtype == np.float32
        _assert_bit_identical(out, x)
    s = jnp.float32(2.5)
    out = kiln.jit(lambda s: s * jnp.ones((2, 2), jnp.float32))(s)
    np.testing.assert_array_equal(np.asarray(out), np.full((2, 2), 2.5, np.float32))


def test_weak_types_survive():
    # a weak operand times a strong 1 is strong; the simplifier must keep the result's aval
    f = kiln.jit(lambda x: x * jnp.float32(1.0))
    out = f(3.0)
    assert out.dtype == np.float32 and not out.weak_type and float(out) == 3.0
    out = kiln.jit(lambda x: x * 1.0)(3.0)
    assert out.weak_type and float(out) == 3.0


def test_values_against_numpy():
    rng = np.random.default_rng()
    x = rng.standard_normal(7)
    np.testing.assert_allclose(np.asarray(kiln.grad(lambda x: jnp.sum(x * x))(jnp.asarray(x, jnp.float32))),
                               2 * x, rtol=1e-6)
    np.testing.assert_allclose(np.asarray(kiln.grad(lambda x: jnp.sum(jnp.sin(x)))(jnp.asarray(x, jnp.float32))),
                               np.cos(x), rtol=1e-5, atol=1e-6)
    a, b = rng.standard_normal((3, 4)), rng.standard_normal(4)
    ga, gb = kiln.grad(lambda a, b: jnp.sum(jnp.dot(a, b)), argnums=(0, 1))(jnp.asarray(a, jnp.float32),
                                                                            jnp.asarray(b, jnp.float32))
    np.testing.assert_allclose(np.asarray(ga), np.broadcast_to(b, (3, 4)), rtol=1e-6)
    # a column sum can cancel to near zero: compare with the float32-rounded inputs and an absolute floor
    np.testing.assert_allclose(np.asarray(gb), a.astype(np.float32).astype(np.float64).sum(0), rtol=1e-5, atol=1e-6)
    t = rng.standard_normal(7)
    y, ty = kiln.jvp(_poly, (jnp.asarray(x, jnp.float32),), (jnp.asarray(t, jnp.float32),))
    np.testing.assert_allclose(np.asarray(y), x ** 3 + 2 * x ** 2 + 3 * x + 1, rtol=1e-5, atol=1e-5)
    np.testing.assert_allclose(np.asarray(ty), (3 * x ** 2 + 4 * x + 3) * t, rtol=1e-5, atol=1e-5)


def test_mlp_grad_against_finite_differences():
    rng = np.random.default_rng()
    w1, w2, xb = rng.standard_normal((3, 4)), rng.standard_normal((4, 2)), rng.standard_normal((6, 3))

    def loss64(w1, w2):
        y = np.tanh(np.tanh(xb @ w1) @ w2)
        return np.mean((y - 1.0) ** 2)

    g1, g2 = kiln.grad(_mlp_loss)((jnp.asarray(w1, jnp.float32), jnp.asarray(w2, jnp.float32)),
                                  jnp.asarray(xb, jnp.float32))
    eps = 1e-6
    for w, g, which in ((w1, g1, 0), (w2, g2, 1)):
        fd = np.zeros_like(w)
        for idx in np.ndindex(w.shape):
            wp, wm = w.copy(), w.copy()
            wp[idx] += eps
            wm[idx] -= eps
            args_p = (wp, w2) if which == 0 else (w1, wp)
            args_m = (wm, w2) if which == 0 else (w1, wm)
            fd[idx] = (loss64(*args_p) - loss64(*args_m)) / (2 * eps)
        np.testing.assert_allclose(np.asarray(g), fd, rtol=1e-3, atol=1e-5)


def test_higher_order_still_respects_stop_gradient():
    # stop_gradient only goes when its operand is a constant; inlined into an outer grad, the
    # inner program's stop_gradient must still block the derivative
    f = lambda x: jnp.sum(lax.stop_gradient(x) * x * x)  # noqa: E731
    x = jnp.asarray(np.array([1.5, -2.0], np.float32))
    np.testing.assert_allclose(np.asarray(kiln.grad(f)(x)), 2 * np.asarray(x) ** 2, rtol=1e-6)
    hess_diag = kiln.grad(lambda x: jnp.sum(kiln.grad(f)(x)))(x)
    np.testing.assert_allclose(np.asarray(hess_diag), 2 * np.asarray(x), rtol=1e-6)


def test_rev_of_rev_composes():
    # regression: simplify composed rev of rev as if it were broadcast_in_dim (reading rev's
    # params as a broadcast's) and crashed the process
    x = np.arange(24.0).reshape(2, 3, 4).astype(np.float32)
    cases = [(lambda v: jnp.flip(jnp.flip(v, 0), 0) * 2, x * 2),
             (lambda v: jnp.flip(jnp.flip(v, 1), 0), x[::-1, ::-1]),
             (lambda v: jnp.flip(jnp.flip(v, (0, 2)), (2, 1)), x[::-1, ::-1])]
    for f, want in cases:
        np.testing.assert_array_equal(np.asarray(kiln.jit(f)(x)), want)
    assert "rev" not in str(kiln.make_jaxpr(lambda v: jnp.flip(jnp.flip(v, 0), 0))(x))  # the two cancel
    assert str(kiln.make_jaxpr(lambda v: jnp.flip(jnp.flip(v, 0), 2))(x)).count("rev[") == 1  # one rev
