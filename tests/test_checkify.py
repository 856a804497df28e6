"""kiln.experimental.checkify against JAX 0.10.2's jax.experimental.checkify: messages, which
failure wins, and the transformations around and inside it. Expected messages were taken from
JAX (the values in them are this run's random inputs, formatted as JAX formats a float32)."""

import numpy as np
import pytest

import kiln
import kiln.numpy as jnp
from kiln import lax
from kiln.experimental import checkify

rng = np.random.default_rng()

FUNCTIONALIZATION = ("Cannot abstractly evaluate a checkify.check which was not functionalized. This probably means "
                     "you tried to stage (jit/scan/pmap/...) a `check` without functionalizing it through "
                     "`checkify.checkify`.")


def neg():
    return np.float32(-rng.uniform(0.5, 100.0))


def pos():
    return np.float32(rng.uniform(0.5, 100.0))


def positive_log(x):
    checkify.check(x > 0, "x must be positive, got {}", x)
    return jnp.log(x)


def test_public_names_are_jaxs():
    jax_names = ['Error', 'ErrorCategory', 'JaxRuntimeError', 'all_checks', 'automatic_checks', 'check',
                 'check_error', 'checkify', 'debug_check', 'div_checks', 'float_checks', 'index_checks',
                 'init_error', 'nan_checks', 'user_checks']
    assert [n for n in dir(checkify) if not n.startswith("_") and n in jax_names] == jax_names
    from kiln.experimental import checkify as again
    assert again is checkify and issubclass(checkify.JaxRuntimeError, ValueError)


def test_error_sets_are_frozensets_of_classes():
    c = checkify
    assert c.float_checks == c.nan_checks | c.div_checks
    assert c.automatic_checks == c.float_checks | c.index_checks
    assert c.all_checks - c.user_checks == c.automatic_checks
    assert c.all_checks - c.automatic_checks == c.user_checks
    assert all(isinstance(s, frozenset) and len(s) == n for s, n in
               [(c.user_checks, 1), (c.nan_checks, 1), (c.index_checks, 1), (c.div_checks, 1), (c.all_checks, 4)])
    assert {k.__name__ for k in c.all_checks} == {"FailedCheckError", "NaNError", "OOBError", "DivisionByZeroError"}


def test_failed_check_message_and_result():
    x = neg()
    err, out = checkify.checkify(positive_log)(jnp.float32(x))
    assert err.get() == f"x must be positive, got {x} (`check` failed)"
    assert str(err) == f"Error(x must be positive, got {x} (`check` failed))"
    assert np.isnan(out)
    y = pos()
    err, out = checkify.checkify(positive_log)(jnp.float32(y))
    assert err.get() is None and str(err) == "Error(None)" and err.get_exception() is None
    np.testing.assert_allclose(out, np.log(y), rtol=1e-6)
    err.throw()
    checkify.check_error(err)


def test_throw_get_exception_and_check_error():
    x = neg()
    err, _ = checkify.checkify(positive_log)(jnp.float32(x))
    exc = err.get_exception()
    assert type(exc).__name__ == "FailedCheckError" and str(exc) == err.get()
    with pytest.raises(checkify.JaxRuntimeError, match=f"x must be positive, got {x}"):
        err.throw()
    with pytest.raises(checkify.JaxRuntimeError) as info:
        checkify.check_error(err)
    assert str(info.value) == f"x must be positive, got {x} (`check` failed)"
    with pytest.raises(TypeError, match="check_error takes an Error as argument, got type <class 'int'> instead."):
        checkify.check_error(3)


def test_format_keyword_and_array_arguments():
    a = rng.integers(-50, 50, size=3).astype(np.int32)
    k = np.int32(rng.integers(0, 9))

    def f(v, i):
        checkify.check(jnp.all(v > 100), "kw {i} and {v}", v=v, i=i)
        return v
    err, _ = checkify.checkify(f)(jnp.asarray(a), jnp.int32(k))
    assert err.get() == f"kw {k} and {a} (`check` failed)"


def test_first_failing_check_wins_in_program_order():
    def g(x):
        checkify.check(x > 0, "first {}", x)
        checkify.check(x > 1000, "second")
        return x
    x = pos()
    assert kiln.jit(checkify.checkify(g))(jnp.float32(x)).__getitem__(0).get() == "second (`check` failed)"
    x = neg()
    assert checkify.checkify(g)(jnp.float32(x))[0].get() == f"first {x} (`check` failed)"
    assert kiln.jit(checkify.checkify(g))(jnp.float32(x))[0].get() == f"first {x} (`check` failed)"


def test_jit_either_side_and_repeated_calls():
    inner = checkify.checkify(kiln.jit(positive_log))
    outer = kiln.jit(checkify.checkify(positive_log))
    for _ in range(2):  # the second call runs the cached program on new values
        x = neg()
        for fn in (inner, outer):
            err, _ = fn(jnp.float32(x))
            assert err.get() == f"x must be positive, got {x} (`check` failed)"
        y = pos()
        for fn in (inner, outer):
            err, out = fn(jnp.float32(y))
            assert err.get() is None
            np.testing.assert_allclose(out, np.log(y), rtol=1e-6)


def test_error_is_a_pytree_of_arrays():
    x = neg()
    err, _ = kiln.jit(checkify.checkify(positive_log))(jnp.float32(x))
    leaves = kiln.tree_util.tree_leaves(err)
    assert len(leaves) == 3  # pred, code, payload (as JAX)
    assert bool(leaves[0]) and float(leaves[2]) == x
    assert kiln.tree_util.tree_leaves(checkify.init_error) == [] and checkify.init_error.get() is None


def test_vmap_of_checkify_reports_each_failing_index():
    xs = np.array([pos(), neg(), pos(), neg()], np.float32)
    err, _ = kiln.vmap(checkify.checkify(positive_log))(jnp.asarray(xs))
    assert err.get() == (f"at mapped index 1: x must be positive, got {xs[1]} (`check` failed)\n"
                         f"at mapped index 3: x must be positive, got {xs[3]} (`check` failed)")
    assert type(err.get_exception()).__name__ == "BatchedError"
    with pytest.raises(checkify.JaxRuntimeError) as info:  # throw reduces to the last failing element
        err.throw()
    assert str(info.value) == f"x must be positive, got {xs[3]} (`check` failed)"
    ok, _ = kiln.vmap(checkify.checkify(positive_log))(jnp.asarray(np.abs(xs)))
    assert ok.get() is None


def test_checkify_of_vmap_keeps_the_last_failing_element():
    xs = np.array([pos(), neg(), neg(), pos()], np.float32)
    err, out = checkify.checkify(kiln.vmap(positive_log))(jnp.asarray(xs))
    assert err.get() == f"x must be positive, got {xs[2]} (`check` failed)"
    np.testing.assert_allclose(np.asarray(out)[[0, 3]], np.log(xs[[0, 3]]), rtol=1e-6)
    err, _ = checkify.checkify(kiln.vmap(positive_log))(jnp.asarray(np.abs(xs)))
    assert err.get() is None


def test_checkify_of_grad():
    x = neg()
    err, g = checkify.checkify(kiln.grad(positive_log))(jnp.float32(x))
    assert err.get() == f"x must be positive, got {x} (`check` failed)"
    y = pos()
    err, g = checkify.checkify(kiln.grad(positive_log))(jnp.float32(y))
    assert err.get() is None
    np.testing.assert_allclose(g, 1 / y, rtol=1e-6)
    # vmap of grad inside checkify: the last failing element
    xs = np.array([pos(), neg(), pos(), neg()], np.float32)
    err, _ = checkify.checkify(kiln.vmap(kiln.grad(positive_log)))(jnp.asarray(xs))
    assert err.get() == f"x must be positive, got {xs[3]} (`check` failed)"


def test_vmap_of_checkify_of_grad_is_not_supported():
    # kiln reads checks inside grad back through a host callback, which a vmap around checkify
    # would run once per element without knowing which (JAX gives one error per element)
    with pytest.raises(NotImplementedError, match="checkify under vmap"):
        kiln.vmap(checkify.checkify(kiln.grad(positive_log)))(jnp.asarray([pos(), neg()]))


def test_checkify_of_vmap_with_a_loop_is_not_supported():
    # the host callbacks of a check inside vmap cannot tell elements of different iterations apart
    def loop(x):
        return lax.fori_loop(0, 4, lambda i, c: (checkify.check(c < 3, "c {}", c), c + 1.)[1], x)
    with pytest.raises(NotImplementedError, match="a check inside vmap with a loop"):
        checkify.checkify(kiln.vmap(loop))(jnp.asarray([0., 5.]))
    with pytest.raises(NotImplementedError, match="a check inside vmap with a loop"):
        checkify.checkify(lambda xs: lax.fori_loop(0, 3, lambda i, c: c + kiln.vmap(positive_log)(xs), xs))(
            jnp.asarray([pos(), neg()]))


def test_checks_in_loop_bodies_keep_the_first_failing_iteration():
    limit = float(rng.integers(2, 6))

    def fori(x):
        def body(i, c):
            checkify.check(c < limit, "c too big {} at {}", c, i)
            return c + 1.
        return lax.fori_loop(0, 10, body, x)

    def while_(x):
        def body(c):
            checkify.check(c < limit, "w {}", c)
            return c + 1.
        return lax.while_loop(lambda c: c < 10, body, x)

    def scan(xs):
        def body(c, y):
            checkify.check(y < limit, "s {}", y)
            return c + y, c
        return lax.scan(body, 0., xs)
    k = int(limit)
    for wrap in (lambda f: f, kiln.jit):
        assert checkify.checkify(wrap(fori))(jnp.float32(0.))[0].get() == f"c too big {limit} at {k} (`check` failed)"
        assert checkify.checkify(wrap(while_))(jnp.float32(0.))[0].get() == f"w {limit} (`check` failed)"
        assert checkify.checkify(wrap(scan))(jnp.arange(10.))[0].get() == f"s {limit} (`check` failed)"
        assert checkify.checkify(wrap(fori))(jnp.float32(-20.))[0].get() is None
    # vmap over a checkified loop: each element's first failing iteration (values from JAX)
    err, _ = kiln.vmap(checkify.checkify(lambda x: lax.fori_loop(
        0, 10, lambda i, c: (checkify.check(c < 3, "c too big {} at {}", c, i), c + 1.)[1], x)))(
        jnp.array([0., 5., 7.]))
    assert err.get() == ("at mapped index 0: c too big 3.0 at 3 (`check` failed)\n"
                         "at mapped index 1: c too big 5.0 at 0 (`check` failed)\n"
                         "at mapped index 2: c too big 7.0 at 0 (`check` failed)")


def test_checks_in_cond_branches():
    def cd(x):
        return lax.cond(x > 0, lambda x: (checkify.check(x < 5, "big {}", x), x)[1], lambda x: x, x)
    big = np.float32(rng.uniform(5.5, 50))
    for wrap in (lambda f: f, kiln.jit):
        assert checkify.checkify(wrap(cd))(jnp.float32(big))[0].get() == f"big {big} (`check` failed)"
        assert checkify.checkify(wrap(cd))(jnp.float32(-big))[0].get() is None


def test_check_outside_checkify():
    with pytest.raises(checkify.JaxRuntimeError, match=r"^bad \(`check` failed\)$"):
        checkify.check(False, "bad")
    v = pos()
    with pytest.raises(checkify.JaxRuntimeError) as info:
        checkify.check(jnp.array(False), "bad {}", jnp.float32(v))
    assert str(info.value) == f"bad {v} (`check` failed)"
    assert checkify.check(jnp.array(True), "fine {}", jnp.float32(v)) is None
    with pytest.raises(ValueError) as info:
        kiln.jit(lambda x: checkify.check(x > 0, "neg {}", x))(jnp.float32(v))
    assert str(info.value) == FUNCTIONALIZATION
    # grad outside jit runs it now, as JAX's eager check
    with pytest.raises(checkify.JaxRuntimeError, match=f"neg {-v}"):
        kiln.grad(lambda x: (checkify.check(x > 0, "neg {}", x), x * 2)[1])(jnp.float32(-v))
    assert float(kiln.grad(lambda x: (checkify.check(x > 0, "neg {}", x), x * 2)[1])(jnp.float32(v))) == 2.0
    with pytest.raises(TypeError, match=r"check takes a scalar pred as argument, got \[ True\]"):
        checkify.check(jnp.array([True]), "x")
    with pytest.raises(TypeError, match="check takes a scalar pred as argument, got 1"):
        checkify.check(1, "x")
    with pytest.raises(TypeError, match="check takes a scalar pred as argument, got False"):
        checkify.check(np.bool_(False), "x")
    with pytest.raises(TypeError, match="Formatting arguments to checkify.check need to be PyTrees of arrays, "
                                        "but got 3 of type <class 'int'>."):
        checkify.check(False, "bad {x}", x=3)
    checkify.debug_check(False, "dropped outside checkify")
    assert checkify.checkify(lambda: checkify.debug_check(False, "dbg"))()[0].get() == "dbg (`check` failed)"


def test_nan_checks_name_the_primitive():
    nc = checkify.nan_checks
    x = neg()
    assert checkify.checkify(jnp.log, errors=nc)(jnp.float32(x))[0].get() == "nan generated by primitive: log."
    assert checkify.checkify(jnp.log, errors=nc)(jnp.float32(-x))[0].get() is None
    assert checkify.checkify(jnp.sin, errors=nc)(jnp.float32(np.inf))[0].get() == "nan generated by primitive: sin."
    assert checkify.checkify(lambda v: v + 1., errors=nc)(jnp.float32(np.nan))[0].get() == \
        "nan generated by primitive: add."
    assert checkify.checkify(lambda v: v.sum() * jnp.nan, errors=nc)(jnp.arange(5.))[0].get() == \
        "nan generated by primitive: mul."
    # a select that makes a NaN is no NaN primitive (as JAX)
    assert checkify.checkify(lambda v: jnp.where(v > 0, v, jnp.nan), errors=nc)(jnp.arange(5.))[0].get() is None
    assert checkify.checkify(jnp.sqrt)(jnp.float32(x))[0].get() is None  # user_checks only
    assert checkify.checkify(jnp.sqrt, errors=checkify.float_checks - checkify.nan_checks)(
        jnp.float32(x))[0].get() is None
    xs = np.array([pos(), x], np.float32)
    assert checkify.checkify(kiln.vmap(jnp.log), errors=nc)(jnp.asarray(xs))[0].get() == \
        "nan generated by primitive: log."
    assert kiln.vmap(checkify.checkify(jnp.log, errors=nc))(jnp.asarray(xs))[0].get() == \
        "at mapped index 1: nan generated by primitive: log."


def test_div_checks():
    dc = checkify.div_checks
    a = np.int32(rng.integers(1, 100))
    assert checkify.checkify(lambda p, q: p // q, errors=dc)(jnp.int32(a), jnp.int32(0))[0].get() == "division by zero"
    assert checkify.checkify(lambda p, q: lax.div(p, q), errors=dc)(jnp.int32(a), jnp.int32(0))[0].get() == \
        "division by zero"
    assert checkify.checkify(lambda p, q: p / q, errors=dc)(jnp.float32(a), jnp.float32(0))[0].get() == \
        "division by zero"
    assert checkify.checkify(lambda p, q: lax.rem(p, q), errors=dc)(jnp.int32(a), jnp.int32(0))[0].get() is None
    err, out = checkify.checkify(lambda p, q: p // q, errors=dc)(jnp.int32(a), jnp.int32(3))
    assert err.get() is None and int(out) == a // 3
    assert checkify.checkify(lambda p, q: lax.rem(p, q), errors=checkify.float_checks)(
        jnp.float32(a), jnp.float32(0))[0].get() == "nan generated by primitive: rem."


def oob(shape, index, axis, size):
    return f"out-of-bounds indexing for array of shape {shape}: index {index} is out of bounds for axis {axis} " \
           f"with size {size}. "


def test_index_checks():
    ic = checkify.index_checks
    n = int(rng.integers(3, 9))
    x = jnp.arange(float(n))
    i = int(rng.integers(n, n + 10))
    cf = lambda f: checkify.checkify(f, errors=ic)  # noqa: E731
    assert cf(lambda v, k: v[k])(x, jnp.int32(i))[0].get() == oob((n,), i, 0, n)
    assert cf(lambda v, k: v[k])(x, jnp.int32(-i - n))[0].get() == oob((n,), -i, 0, n)  # wrapped once, as JAX
    assert cf(lambda v, k: v[k])(x, jnp.int32(n - 1))[0].get() is None
    assert cf(lambda v, k: v[k])(x, jnp.int32(-n))[0].get() is None
    assert cf(lambda v, k: v[k])(x, jnp.array([1, i, i + 1]))[0].get() == oob((n,), i, 0, n)
    m = jnp.arange(6.).reshape(2, 3)
    assert cf(lambda v, k: v[k])(m, jnp.array([0, 5]))[0].get() == oob((2, 3), 5, 0, 2)
    assert cf(lambda v, k: v[k, 1])(jnp.arange(6.).reshape(3, 2), jnp.int32(3))[0].get() == oob((3, 2), 3, 0, 3)
    assert cf(lambda v, k: lax.dynamic_slice(v, (k,), (2,)))(x, jnp.int32(n - 1))[0].get() == oob((n,), n - 1, 0, n)
    assert cf(lambda v, k: lax.dynamic_slice(v, (k,), (2,)))(x, jnp.int32(n - 2))[0].get() is None
    assert cf(lambda v, k: lax.dynamic_update_slice(v, jnp.ones(2), (k,)))(x, jnp.int32(n - 1))[0].get() == \
        oob((n,), n - 1, 0, n)
    assert cf(lambda v, k: v.at[k].set(1.))(x, jnp.int32(i))[0].get() == oob((n,), i, 0, n)
    assert cf(lambda v, k: v.at[k].add(1.))(x, jnp.array([1, i]))[0].get() == oob((n,), i, 0, n)
    assert cf(lambda v: jnp.take(v, jnp.array([i]), mode="clip"))(x)[0].get() == oob((n,), i, 0, n)
    assert checkify.checkify(lambda v, k: v[k])(x, jnp.int32(i))[0].get() is None  # user_checks only


def test_index_checks_on_constants_and_other_gathers():
    # closed-over arrays: kiln computes ops on constants at once, JAX stages them; both check them
    m = jnp.arange(12.).reshape(3, 4)
    i = int(rng.integers(4, 20))
    cases = [(lambda: m[:, jnp.int32(i)], oob((3, 4), i, 1, 4)),
             (lambda: m[jnp.int32(2), jnp.int32(i)], oob((3, 4), i, 1, 4)),
             (lambda: m[jnp.int32(-i - 3), jnp.int32(2)], oob((3, 4), -i, 0, 3)),
             (lambda: lax.dynamic_slice_in_dim(m, jnp.int32(2), 2, axis=0), oob((3, 4), 2, 0, 3)),
             (lambda: lax.dynamic_index_in_dim(m, jnp.int32(i), axis=1), oob((3, 4), i, 1, 4)),
             (lambda: jnp.take_along_axis(m, jnp.array([[0], [i], [1]]), axis=1), oob((3, 4), i, 1, 4)),
             (lambda: m.at[jnp.int32(2), jnp.int32(i)].set(0.), oob((3, 4), i, 1, 4)),
             (lambda: m[jnp.array([0, 1]), jnp.array([1, i])], oob((3, 4), i, 1, 4)),
             (lambda: lax.dynamic_update_slice(m, jnp.ones((2, 2)), (jnp.int32(2), jnp.int32(2))),
              oob((3, 4), 2, 0, 3)),
             (lambda: m[1:5], None), (lambda: jnp.take(m, jnp.array([i]), mode="wrap"), None)]
    for f, want in cases:
        assert checkify.checkify(f, errors=checkify.index_checks)()[0].get() == want


def test_checks_under_remat_map_and_disable_jit():
    m = jnp.asarray(rng.uniform(-10, 10, size=(3, 4)).astype(np.float32))
    first = np.asarray(m)[0, 0]
    err, _ = checkify.checkify(lambda: kiln.checkpoint(
        lambda v: (checkify.check(v[0, 0] > 10, "remat {}", v[0, 0]), v)[1])(m))()
    assert err.get() == f"remat {first} (`check` failed)"
    rows = np.asarray(m)[:, 0]
    err, _ = checkify.checkify(lambda: lax.map(lambda r: (checkify.check(r[0] > 10, "row {}", r[0]), r)[1], m))()
    assert err.get() == f"row {rows[0]} (`check` failed)"
    x = neg()
    with kiln.disable_jit():
        err, _ = checkify.checkify(lambda v: (checkify.check(v > 0, "dj {}", v), lax.cond(
            v < 0, lambda: jnp.log(v), lambda: v))[1], errors=checkify.all_checks)(jnp.float32(x))
    assert err.get() == f"dj {x} (`check` failed)"


def test_user_checks_win_over_automatic_ones():
    def log_then_check(x):  # JAX numbers user checks first, whatever their place
        y = jnp.log(x)
        checkify.check(x > 0, "pos")
        return y
    assert checkify.checkify(log_then_check, errors=checkify.all_checks)(jnp.float32(neg()))[0].get() == \
        "pos (`check` failed)"


def test_nested_checkify_and_check_error_inside():
    def g(x):
        checkify.check(x > 0, "first {}", x)
        return x

    def outer(x):
        e, y = checkify.checkify(g)(x)
        checkify.check(x < 10, "outer")
        return e, y
    e, (ei, _) = checkify.checkify(outer)(jnp.float32(20.))
    assert e.get() == "outer (`check` failed)" and ei.get() is None
    x = neg()
    e, (ei, _) = checkify.checkify(outer)(jnp.float32(x))
    assert e.get() is None and ei.get() == f"first {x} (`check` failed)"
    err, _ = checkify.checkify(lambda v: checkify.check_error(checkify.checkify(g)(v)[0]))(jnp.float32(x))
    assert err.get() == f"first {x} (`check` failed)"
    concrete, _ = checkify.checkify(g)(jnp.float32(x))
    with pytest.raises(ValueError) as info:  # staged without checkify, as JAX
        kiln.jit(lambda v: checkify.check_error(concrete))(1.)
    assert str(info.value) == FUNCTIONALIZATION


def test_check_inside_custom_jvp():
    f = kiln.custom_jvp(lambda x: (checkify.check(x > 0, "cj {}", x), x)[1])
    f.defjvp(lambda p, t: (f(p[0]), t[0]))
    x = neg()
    assert checkify.checkify(f)(jnp.float32(x))[0].get() == f"cj {x} (`check` failed)"
    assert checkify.checkify(kiln.grad(f))(jnp.float32(x))[0].get() == f"cj {x} (`check` failed)"


def test_hooks_are_off_outside_checkify():
    # automatic checks hook kiln's binds only while a checkify that enables them traces
    from kiln import _kiln
    from kiln._src.numpy import indexing
    checkify.checkify(jnp.log, errors=checkify.all_checks)(jnp.float32(2.))
    prev = _kiln.set_bind_hook(None)
    assert prev is None and indexing.index_hook[0] is None
    with pytest.raises(TypeError, match="checkify: errors must be a set of checkify error classes"):
        checkify.checkify(jnp.log, errors={"nan"})


def test_a_check_inside_shard_map_within_checkify_raises_not_a_lost_failure():
    """A check inside shard_map or pmap within checkify would lose its failure in kiln: it raises
    NotImplementedError naming the way that works (checkify inside the map), which agrees with JAX."""
    import numpy as np
    from kiln.sharding import Mesh, PartitionSpec as P
    mesh = Mesh(np.array(kiln.devices()[:1]), ("i",))

    def f(x):
        checkify.check(jnp.all(x > 0), "neg!")
        return x * 2
    x = -jnp.abs(jnp.asarray(np.random.default_rng().standard_normal(4), jnp.float32)) - 0.1
    with pytest.raises(NotImplementedError, match="shard_map or pmap within checkify"):
        checkify.checkify(kiln.shard_map(f, mesh=mesh, in_specs=P("i"), out_specs=P("i")))(x)
    with pytest.raises(NotImplementedError, match="shard_map or pmap within checkify"):
        checkify.checkify(kiln.pmap(f, axis_name="i"))(x[None])
    err, out = kiln.pmap(checkify.checkify(f), axis_name="i")(x[None])
    assert "neg!" in err.get()
    np.testing.assert_allclose(out, 2 * x[None])
