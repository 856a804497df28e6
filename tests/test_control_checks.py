"""Control flow refuses what JAX refuses, with JAX's messages: branch outputs that differ in
structure or type (cond, switch, also when the predicate is concrete: every branch is checked),
and loop bodies whose carry output differs from the carry input (while_loop, fori_loop, scan),
naming the leaf by its key path. A weak-typed initial carry takes the body's dtype, as in JAX."""

import collections

import numpy as np
import pytest

import kiln
import kiln.numpy as jnp
from kiln import lax


def _where(f):
    return f"{f.__name__} at {f.__code__.co_filename}:{f.__code__.co_firstlineno}"


def test_cond_branch_types_differ_under_jit():
    def t(x):
        return x

    def f(x):
        return x[:1]

    with pytest.raises(TypeError) as e:
        kiln.jit(lambda p, x: lax.cond(p, t, f, x))(True, np.ones(2, np.float32))
    assert str(e.value) == (
        "cond branches must have equal output types but they differ.\n\n"
        f"true_fun is {_where(t)}\nfalse_fun is {_where(f)}\n\n"
        "The output of true_fun has type float32[2] but the corresponding output of false_fun has type float32[1], "
        "so the shapes do not match.\n\nRevise true_fun and/or false_fun so that all output types match.")


@pytest.mark.parametrize("pred", [True, False])
def test_cond_with_a_concrete_predicate_checks_the_other_branch(pred):
    def t(x):
        return {"a": x}

    def f(x):
        return {"a": x, "b": x}

    with pytest.raises(TypeError) as e:
        lax.cond(pred, t, f, jnp.ones(2))
    assert str(e.value) == (
        "cond branch outputs must have the same pytree structure, but they differ:\n\n"
        f"true_fun is {_where(t)}\nfalse_fun is {_where(f)}\n\n"
        "true_fun output is a <class 'dict'> with 1 child but false_fun output is a <class 'dict'> with 2 "
        "children, so the numbers of children do not match, with the symmetric difference of key sets: {'b'}.\n\n"
        "Revise true_fun and/or false_fun so that they have the same pytree structure.")
    # matching branches still take only the taken one's value
    x = np.random.default_rng(0).standard_normal(3).astype(np.float32)
    got = lax.cond(pred, lambda x: x * 2, lambda x: x - 1, x)
    np.testing.assert_allclose(np.asarray(got), x * 2 if pred else x - 1, rtol=1e-6)


def test_switch_names_branches_as_jax_does():
    def b0(x):
        return x

    def b1(x):
        return x + 1

    def b2(x):
        return x.astype(jnp.int32), x

    with pytest.raises(TypeError) as e:
        lax.switch(1, [b0, b1, b2], jnp.ones(2))
    assert str(e.value) == (
        "switch branch outputs must have the same pytree structure, but they differ:\n\n"
        f"branch 0 is {_where(b0)}\nbranch2 is {_where(b2)}\n\n"
        "branch 0 output is a pytree leaf but branch2 output is a <class 'tuple'>, so their Python types differ.\n\n"
        "Revise branch 0 and/or branch2 so that they have the same pytree structure.")

    def c2(x):
        return x.astype(jnp.int32)

    with pytest.raises(TypeError, match=r"output of branch2 has type int32\[2\], so the dtypes do not match"):
        kiln.jit(lambda i, x: lax.switch(i, [b0, b1, c2], x))(0, np.ones(2, np.float32))


def test_while_loop_body_changing_a_carry_dtype():
    def body(carry):
        return [carry[0] + 1, carry[1] * 1.0, carry[2]]

    with pytest.raises(TypeError) as e:
        lax.while_loop(lambda c: c[0] < 3, body, [0, jnp.ones(2, jnp.int32), 1.0])
    assert str(e.value) == (
        "while_loop body function carry input and carry output must have equal types, but they differ:\n\n"
        "The input carry component carry[1] has type int32[2] but the corresponding output carry component has "
        "type float32[2], so the dtypes do not match.\n\n"
        "Revise the function so that all output types match the corresponding input types.")


def test_fori_loop_and_scan_name_the_leaf():
    with pytest.raises(TypeError, match=r"input carry component loop_carry\[1\] has type float32\[2\] but the "
                                        r"corresponding output carry component has type float16\[2\]"):
        kiln.jit(lambda x: lax.fori_loop(0, 3, lambda i, x: x.astype(jnp.float16), x))(np.ones(2, np.float32))

    P = collections.namedtuple("P", "w b")

    def step(state, x):
        return P(state.w, state.b[:1]), x

    with pytest.raises(TypeError) as e:
        lax.scan(step, P(jnp.ones(3), jnp.ones(2)), jnp.ones(4))
    assert str(e.value) == (
        "scan body function carry input and carry output must have equal types, but they differ:\n\n"
        "The input carry component state.b has type float32[2] but the corresponding output carry component has "
        "type float32[1], so the shapes do not match.\n\n"
        "Revise the function so that all output types match the corresponding input types.")

    def grow(c, x):
        return {"a": c["a"], "b": 1.0}, x

    with pytest.raises(TypeError) as e:
        lax.scan(grow, {"a": 1.0}, jnp.ones(3))
    assert str(e.value) == (
        "scan body function carry input and carry output must have the same pytree structure, but they differ:\n\n"
        "The input carry c is a <class 'dict'> with 1 child but the corresponding component of the carry output is "
        "a <class 'dict'> with 2 children, so the numbers of children do not match, with the symmetric difference "
        "of key sets: {'b'}.\n\n"
        "Revise the function so that the carry output has the same pytree structure as the carry input.")


def test_several_differences_are_listed():
    def body(i, c):
        return c[0].astype(jnp.int32), c[1][:1]

    with pytest.raises(TypeError) as e:
        lax.fori_loop(0, 2, body, (jnp.ones(2), jnp.ones(2)))
    assert str(e.value).startswith(
        "scan body function carry input and carry output must have equal types, but they differ:\n\n"
        "  * the input carry component loop_carry[1][0] has type float32[2] but the corresponding output carry "
        "component has type int32[2], so the dtypes do not match;\n"
        "  * the input carry component loop_carry[1][1] has type float32[2] but the corresponding output carry "
        "component has type float32[1], so the shapes do not match.\n")


def test_a_weak_typed_initial_carry_takes_the_bodys_dtype():
    out = lax.while_loop(lambda c: c < 3, lambda c: c + 1.5, 0)
    assert float(out) == 3.0 and np.asarray(out).dtype == np.float32
    out = lax.fori_loop(0, 3, lambda i, c: c + jnp.float32(0.5), 1)
    assert float(out) == 2.5 and np.asarray(out).dtype == np.float32
    carry, ys = lax.scan(lambda c, x: (c + x, c), 0, jnp.arange(3.0))
    assert float(carry) == 3.0
    np.testing.assert_array_equal(np.asarray(ys), [0.0, 0.0, 1.0])


def test_eager_control_flow_hands_arrays_to_its_functions():
    # bug (issue 32): eager cond/switch/while/fori/scan passed NumPy operands to the user's functions
    # as they were (AttributeError: 'numpy.ndarray' object has no attribute 'at'), and Python scalars
    # came back as Python floats (float64 to NumPy); JAX's functions always see arrays
    import kiln
    import kiln.numpy as jnp
    from kiln import lax
    got = lax.fori_loop(0, 1, lambda i, c: c.at[0].add(1), np.ones(3))
    assert got.dtype == np.float32 and np.asarray(got).tolist() == [2.0, 1.0, 1.0]
    got = lax.fori_loop(0, 3, lambda i, c: c + i, 1.0)
    assert isinstance(got, kiln.Array) and got.dtype == np.float32 and float(got) == 4.0
    assert np.asarray(lax.while_loop(lambda c: c[0] < 3, lambda c: c.at[0].add(1), np.zeros(2))).tolist() == [3, 0]
    assert np.asarray(lax.cond(True, lambda x: x.at[0].set(5), lambda x: x, np.zeros(2))).tolist() == [5, 0]
    assert np.asarray(lax.switch(1, [lambda x: x.at[0].set(5), lambda x: x.at[1].set(6)], np.zeros(2))).tolist() == [0, 6]
    carry, ys = lax.scan(lambda c, x: (c.at[0].add(x), c.sum()), np.zeros(2), np.arange(3.0))
    assert np.asarray(carry).tolist() == [3, 0] and np.asarray(ys).tolist() == [0, 0, 1]
    # fori_loop's index is weakly typed under jit too (JAX's int(lower)): an int8 carry plus it stays int8
    got = kiln.jit(lambda c: lax.fori_loop(0, 3, lambda i, c: c + i, c))(np.int8(1))
    assert got.dtype == np.int8 and int(got) == 4
    got = kiln.jit(lambda: lax.fori_loop(0, 3, lambda i, c: c + i * jnp.ones((), jnp.int8), jnp.zeros((), jnp.int8)))()
    assert got.dtype == np.int8 and int(got) == 3


def test_predicates_and_indices_are_checked_as_jax():
    # bug (issue 32): an eager while_loop accepted a float predicate (JAX: TypeError), a non-scalar
    # cond/while predicate raised ValueError (JAX: TypeError), switch took a float index
    import kiln.numpy as jnp
    from kiln import lax
    with pytest.raises(TypeError, match="boolean scalar"):
        lax.while_loop(lambda c: (c < 1).astype(jnp.float32), lambda c: c + 1, jnp.asarray(0))
    with pytest.raises(TypeError, match="boolean scalar"):
        lax.while_loop(lambda c: jnp.stack([c < 1, c < 1]), lambda c: c + 1, jnp.asarray(0))
    with pytest.raises(TypeError, match="scalar"):
        lax.cond(jnp.asarray([True, False]), lambda x: x + 1, lambda x: x, 1.0)
    with pytest.raises(TypeError, match="boolean or number"):
        lax.cond(1 + 0j, lambda: 0, lambda: 1)
    with pytest.raises(TypeError, match="integer"):
        lax.switch(1.0, [lambda x: x, lambda x: x + 1], 1.0)
    with pytest.raises(TypeError, match="integer"):
        lax.switch(True, [lambda x: x, lambda x: x + 1], 1.0)
    with pytest.raises(TypeError, match="scalar"):
        lax.switch(jnp.asarray([1]), [lambda x: x, lambda x: x + 1], 1.0)
    assert float(lax.cond(1.0, lambda x: x + 1, lambda x: x, 1.0)) == 2.0  # numbers are fine, as in JAX
