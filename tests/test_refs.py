"""Mutable array references (kiln.new_ref / kiln.ref, JAX's Ref), issue 12 item 7: reads and
writes outside traces, inside jit (threaded through the call, updated in place by donation),
loop bodies and cond branches, under grad when made inside; errors where kiln cannot follow."""
import numpy as np
import pytest

import kiln
import kiln.numpy as jnp
from kiln import lax


def test_a_ref_outside_any_trace():
    r = kiln.new_ref(jnp.arange(5))
    assert repr(r) == "Ref([0, 1, 2, 3, 4], dtype=int32)" and r.shape == (5,) and r.dtype == np.int32
    r[3] = 100
    r[1:3] += 10
    np.testing.assert_array_equal(np.asarray(r[...]), [0, 11, 12, 100, 4])
    assert int(kiln.ref.swap(r, 0, 7)) == 0 and int(kiln.ref.get(r, 0)) == 7
    kiln.ref.addupdate(r, 4, 1)
    kiln.ref.set(r, None, jnp.ones(5, jnp.int32))  # the whole value
    np.testing.assert_array_equal(np.asarray(kiln.ref.freeze(r)), np.ones(5))
    with pytest.raises(RuntimeError, match="frozen"):
        r[0]
    s = kiln.new_ref(jnp.int32(5))
    s[...] = 4
    assert repr(s) == "Ref(4, dtype=int32)"


def test_jit_closing_over_a_ref_updates_it_at_each_call():
    x_ref = kiln.new_ref(jnp.zeros(3))

    @kiln.jit
    def f():
        x_ref[1] += 1.0

    f()
    f()
    np.testing.assert_array_equal(np.asarray(x_ref[...]), [0.0, 2.0, 0.0])
    assert f._cache_size() == 1
    held = x_ref[...]  # a copy: the next call's donation leaves it alone
    f()
    np.testing.assert_array_equal(np.asarray(held), [0.0, 2.0, 0.0])
    np.testing.assert_array_equal(np.asarray(x_ref[...]), [0.0, 3.0, 0.0])
    rng = np.random.default_rng(0)
    w = kiln.new_ref(rng.standard_normal((4, 4)).astype(np.float32))
    start = np.asarray(w[...]).astype(np.float64)
    step = kiln.jit(lambda g: (w.__setitem__(Ellipsis, w[...] - 0.5 * g), jnp.sum(w[...]))[1])
    g = rng.standard_normal((4, 4)).astype(np.float32)
    total = step(g)
    np.testing.assert_allclose(np.asarray(w[...]), start - 0.5 * g, rtol=1e-6)
    np.testing.assert_allclose(float(total), (start - 0.5 * g).sum(), rtol=1e-5)


def test_a_ref_passed_as_an_argument_and_one_only_read():
    r, c = kiln.new_ref(jnp.zeros(2)), kiln.new_ref(jnp.full(2, 3.0))

    @kiln.jit
    def f(ref, x):
        ref[...] = ref[...] + x * c[...]  # c is only read: its current value goes in at each call
        return ref[0]

    assert float(f(r, jnp.ones(2))) == 3.0
    c[...] = jnp.full(2, 10.0)
    assert float(f(r, jnp.ones(2))) == 13.0
    np.testing.assert_array_equal(np.asarray(r[...]), [13.0, 13.0])


def test_refs_in_loop_bodies_and_cond_branches():
    acc = kiln.new_ref(jnp.zeros(5))
    count = kiln.new_ref(jnp.int32(0))

    @kiln.jit
    def f(xs):
        def body(i, s):
            acc[i % 5] += xs[i]
            lax.cond(xs[i] > 4.0, lambda: count.__setitem__(Ellipsis, count[...] + 1), lambda: None)
            return s + xs[i]
        return lax.fori_loop(0, xs.shape[0], body, 0.0)

    xs = np.arange(10.0, dtype=np.float32)
    assert float(f(xs)) == 45.0
    np.testing.assert_array_equal(np.asarray(acc[...]), [5, 7, 9, 11, 13])
    assert int(count[...]) == 5
    f(xs)
    assert int(count[...]) == 10
    # scan and while_loop, a ref made inside the jitted function and carried through them
    def g(x):
        r = kiln.new_ref(jnp.zeros(4))
        lax.scan(lambda c, i: (r.__setitem__(i, c * 2.0), c + 1.0)[1:] and (c + 1.0, None), x, jnp.arange(4))
        n = lax.while_loop(lambda k: r[0] + k < 10.0, lambda k: (r.__setitem__(0, r[0] + 1.0), k + 1.0)[1], 0.0)
        return r[...], n

    got, n = kiln.jit(g)(1.0)
    np.testing.assert_array_equal(np.asarray(got), [6.0, 4.0, 6.0, 8.0])  # r[0]: 2, then + 1 in each of 4 trips
    assert float(n) == 4.0


def test_grad_of_a_function_using_refs_inside():
    def g(x):
        r = kiln.new_ref(0.0)
        r[...] = jnp.sin(x)
        return r[...]

    assert abs(float(kiln.grad(g)(1.0)) - np.cos(1.0)) < 1e-6

    def pure2(x):
        ref = kiln.new_ref(x)
        ref[...] = ref[...] + ref[...]
        return ref[...]

    assert float(kiln.jit(kiln.grad(pure2))(3.0)) == 2.0

    def looped(x):  # a ref carried by a loop inside a differentiated function
        r = kiln.new_ref(x)
        lax.fori_loop(0, 3, lambda i, c: (r.__setitem__(Ellipsis, r[...] * x), c)[1], 0)
        return r[...]

    np.testing.assert_allclose(float(kiln.jit(kiln.grad(looped))(1.5)), 4 * 1.5 ** 3, rtol=1e-5)


def test_what_kiln_cannot_follow_raises():
    r = kiln.new_ref(jnp.zeros(3))
    with pytest.raises(NotImplementedError, match="writing a Ref made outside"):
        kiln.grad(lambda x: (r.__setitem__(0, x), x * 2.0)[1])(1.0)
    with pytest.raises(NotImplementedError, match="writing a Ref made outside"):
        kiln.vmap(lambda x: (r.__setitem__(0, x), x)[1])(jnp.ones(3))
    assert float(kiln.grad(lambda x: x * r[1] + x)(2.0)) == 1.0  # reading one is fine
    inner = []
    kiln.jit(lambda x: (inner.append(kiln.new_ref(x)), x)[1])(1.0)
    with pytest.raises(kiln.errors.UnexpectedTracerError, match="Ref created inside"):
        inner[0][...]
    np.testing.assert_array_equal(np.asarray(r[...]), np.zeros(3))  # untouched by the failures


def test_a_ref_update_under_jit_is_in_place(capfd):
    n = 1 << 20
    r = kiln.new_ref(jnp.zeros(n, jnp.float32))
    put = kiln.jit(lambda i, v: r.__setitem__(i, v))
    kiln.config.update("kiln_forbid_copies", True)
    try:
        for i in range(100):
            put(i, float(i))
    finally:
        kiln.config.update("kiln_forbid_copies", False)
    want = np.zeros(n, np.float32)
    want[:100] = np.arange(100)
    np.testing.assert_array_equal(np.asarray(r[...]), want)


def test_ref_writes_are_checked_as_jax():
    # bug (issue 32): Ref writes of the wrong dtype were converted, of the wrong shape broadcast, and at an
    # out-of-range index dropped (reads clamped); JAX raises ValueError for all of them, converting only
    # weakly typed floats into float Refs and integers into integer Refs
    import kiln.numpy as jnp
    r = kiln.new_ref(jnp.zeros(2, jnp.int32))
    with pytest.raises(ValueError, match="Invalid dtype for `swap`"):
        r[...] = jnp.asarray([1.5, 2.5])
    with pytest.raises(ValueError, match="Invalid dtype for `swap`"):
        r[0] = 1.5
    with pytest.raises(ValueError, match="Invalid dtype for `addupdate`"):
        r.addupdate(jnp.asarray([1.5, 2.5]))
    r[...] = jnp.ones(2, jnp.int8)  # integers convert
    f = kiln.new_ref(jnp.zeros((2, 3)))
    with pytest.raises(ValueError, match="Invalid dtype"):
        f[...] = jnp.ones((2, 3), jnp.int32)
    f[0, 1] = 3.0  # a weakly typed float converts
    with pytest.raises(ValueError, match="Invalid shape for `swap`"):
        f[...] = 1.0
    with pytest.raises(ValueError, match="Invalid shape for `swap`"):
        f[0] = jnp.ones(1)
    with pytest.raises(ValueError, match="Out of bound"):
        f[2] = jnp.ones(3)
    with pytest.raises(ValueError, match="Out of bound"):
        f[0, 5]
    with pytest.raises(ValueError, match="Invalid shape for `addupdate`"):
        f.addupdate(1.0, 0)
    f[1:5] = jnp.ones((1, 3))  # slices clip, as NumPy's
    f.addupdate(jnp.ones(3), 0)
    assert np.asarray(f[...]).tolist() == [[1.0, 4.0, 1.0], [1.0, 1.0, 1.0]]
    with pytest.raises(ValueError, match="Invalid dtype"):
        kiln.jit(lambda: r.__setitem__(..., jnp.asarray([1.5, 2.5])))()
