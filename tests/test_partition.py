"""Sharding propagation for jit (python/kiln/_src/partition.py): functions called on sharded arrays
(or with in_shardings) run one piece per device with collectives where the rules put them. Each
test checks the values (against the same jit on plain arrays and NumPy in float64), the results'
shardings as the README's rules say, and the plan's structure (which collectives were inserted,
what ran replicated), so a test cannot pass through the gathered fallback by accident."""
import numpy as np
import pytest

import kiln
import kiln.numpy as jnp
from kiln import lax
from kiln._src import partition
from kiln.sharding import NamedSharding, PartitionSpec as P

N = len(kiln.devices())
pytestmark = pytest.mark.skipif(N < 8 or kiln.default_backend() != "cpu",
                                reason="needs 8 simulated CPU devices (KILN_NUM_CPU_DEVICES=8)")

MESHES_1D = [((2,), ("i",)), ((4,), ("i",)), ((8,), ("i",))]


def _rand(*shape, seed=0):
    return np.random.default_rng(seed).standard_normal(shape).astype(np.float32)


def _put(x, mesh, *spec):
    return kiln.device_put(jnp.asarray(x), NamedSharding(mesh, P(*spec)))


def _run(f, *args, **jit_kw):
    """f under jit on the given (sharded) args, checked to have been partitioned; (result, plan)."""
    before = partition.stats["partitioned"]
    out = kiln.jit(f, **jit_kw)(*args)
    assert partition.stats["partitioned"] == before + 1, "the call was not partitioned"
    return out, partition.last_plan


def _close(a, b, tol=1e-5):
    np.testing.assert_allclose(np.asarray(a, np.float64), np.asarray(b, np.float64), rtol=tol, atol=tol)


def _kinds(plan):
    return [c[0] for c in plan.collectives]


# ---- elementwise ----

@pytest.mark.parametrize("shape,names", MESHES_1D + [((2, 4), ("x", "y"))])
def test_elementwise_chain_keeps_the_split_and_needs_no_collective(shape, names):
    mesh = kiln.make_mesh(shape, names)
    x, y = _rand(8, 16), _rand(8, 16, seed=1)
    spec = names if len(names) == 2 else (names[0],)
    xs, ys = _put(x, mesh, *spec), _put(y, mesh, *spec)

    def f(a, b):
        return jnp.tanh(a * 2.0 + b) - jnp.exp(-b) * (a > 0)
    out, plan = _run(f, xs, ys)
    _close(out, np.tanh(x.astype(np.float64) * 2 + y) - np.exp(-y.astype(np.float64)) * (x > 0))
    _close(out, kiln.jit(f)(jnp.asarray(x), jnp.asarray(y)))
    assert out.sharding == NamedSharding(mesh, P(*spec))
    assert plan.collectives == [] and plan.replicated == []
    for sh in out.addressable_shards:  # each device holds only its piece
        assert sh.data.shape == tuple(8 // k for k in (mesh.size // (4 if len(names) == 2 else 1),)) + sh.data.shape[1:]


def test_elementwise_conflict_the_operand_on_more_devices_wins():
    mesh = kiln.make_mesh((2, 4), ("x", "y"))
    x, y = _rand(8, 8), _rand(8, 8, seed=1)
    out, plan = _run(lambda a, b: a + b, _put(x, mesh, "x"), _put(y, mesh, "y"))
    assert out.sharding.spec == P("y")  # split 4 ways beats split 2 ways
    assert plan.collectives == [("all_gather", "add", ("x",))]
    _close(out, x + y)
    out, plan = _run(lambda a, b: (a + b, a * b - b), _put(x, mesh, "x"), _put(y, mesh, "y"))
    assert plan.collectives == [("all_gather", "add", ("x",))]  # a is resharded once for both uses
    _close(out[1], x * y - y)
    out, plan = _run(lambda a, b: a * b, _put(x, mesh, "y"), _put(y, mesh, None, "y"))
    assert out.sharding.spec == P("y")  # a tie: the leftmost operand; b's "y" is taken: gathered
    assert plan.collectives == [("all_gather", "mul", ("y",))]
    _close(out, x * y)


def test_elementwise_splits_on_different_axes_merge_without_communication():
    mesh = kiln.make_mesh((2, 4), ("x", "y"))
    x, y = _rand(8, 8), _rand(8, 8, seed=1)
    out, plan = _run(lambda a, b: a + b, _put(x, mesh, "x"), _put(y, mesh, None, "y"))
    assert out.sharding.spec == P("x", "y") and plan.collectives == []  # as JAX: P('x', 'y')
    _close(out, x + y)


def test_replicated_operand_is_cut_locally_without_communication():
    mesh = kiln.make_mesh((4,), ("i",))
    x, b = _rand(8, 4), _rand(8, 4, seed=2)
    out, plan = _run(lambda a, c: a - c + jnp.arange(4.0), _put(x, mesh, "i"), jnp.asarray(b))
    assert out.sharding.spec == P("i") and plan.collectives == []
    _close(out, x - b + np.arange(4.0))


# ---- reductions ----

@pytest.mark.parametrize("shape,names", MESHES_1D + [((2, 4), ("x", "y"))])
def test_sum_and_max_over_split_and_unsplit_axes(shape, names):
    mesh = kiln.make_mesh(shape, names)
    x = _rand(8, 16)
    spec = names if len(names) == 2 else (names[0],)
    xs = _put(x, mesh, *spec)

    def f(a):
        return jnp.sum(a, axis=0), jnp.max(a, axis=1), jnp.sum(a), jnp.min(a, axis=1)
    out, plan = _run(f, xs)
    x64 = x.astype(np.float64)
    for o, want in zip(out, (x64.sum(0), x64.max(1), x64.sum(), x64.min(1))):
        _close(o, want, 1e-4)
    for o, want in zip(out, kiln.jit(f)(jnp.asarray(x))):
        _close(o, want, 1e-4)
    if len(names) == 1:
        assert [o.sharding.spec for o in out] == [P(), P("i"), P(), P("i")]
        assert plan.collectives == [("psum", "reduce_sum", ("i",)), ("psum", "reduce_sum", ("i",))]
    else:
        assert [o.sharding.spec for o in out] == [P("y"), P("x"), P(), P("x")]
        assert plan.collectives == [("psum", "reduce_sum", ("x",)), ("pmax", "reduce_max", ("y",)),
                                    ("psum", "reduce_sum", ("x", "y")), ("pmin", "reduce_min", ("y",))]


def test_mean_and_integer_sum_over_a_split_axis():
    mesh = kiln.make_mesh((8,), ("i",))
    x = np.arange(64, dtype=np.int32).reshape(16, 4)
    out, plan = _run(lambda a: (jnp.sum(a, axis=0), jnp.mean(a.astype(jnp.float32))), _put(x, mesh, "i"))
    np.testing.assert_array_equal(np.asarray(out[0]), x.sum(0))
    _close(out[1], x.mean())
    assert _kinds(plan) == ["psum", "psum"]


# ---- matmul ----

@pytest.mark.parametrize("shape,names", MESHES_1D)
def test_matmul_row_split_lhs_is_data_parallel(shape, names):
    mesh = kiln.make_mesh(shape, names)
    x, w = _rand(16, 8), _rand(8, 5, seed=1)
    out, plan = _run(lambda a, b: a @ b, _put(x, mesh, "i"), jnp.asarray(w))
    assert plan.collectives == [] and out.sharding.spec == P("i")
    _close(out, x.astype(np.float64) @ w)


@pytest.mark.parametrize("shape,names", MESHES_1D + [((2, 4), ("x", "y"))])
def test_matmul_split_contracting_axis_is_a_local_product_and_psum(shape, names):
    mesh = kiln.make_mesh(shape, names)
    ax = names if len(names) == 1 else ("y",)
    x, w = _rand(6, 16), _rand(16, 5, seed=1)
    out, plan = _run(lambda a, b: a @ b, _put(x, mesh, None, ax[0]), _put(w, mesh, ax[0]))
    assert plan.collectives == [("psum", "dot_general", ax)]
    assert out.sharding.spec == P()
    _close(out, x.astype(np.float64) @ w)
    _close(out, kiln.jit(lambda a, b: a @ b)(jnp.asarray(x), jnp.asarray(w)))


def test_matmul_2d_mesh_rows_and_columns():
    mesh = kiln.make_mesh((2, 4), ("x", "y"))
    x, w = _rand(8, 16), _rand(16, 12, seed=1)
    out, plan = _run(lambda a, b: a @ b, _put(x, mesh, "x"), _put(w, mesh, None, "y"))
    assert plan.collectives == [] and out.sharding.spec == P("x", "y")
    _close(out, x.astype(np.float64) @ w)
    # the contracting axis split on the lhs only: the replicated rhs is cut, then psum
    out, plan = _run(lambda a, b: a @ b, _put(x, mesh, "x", "y"), jnp.asarray(w))
    assert plan.collectives == [("psum", "dot_general", ("y",))] and out.sharding.spec == P("x")
    _close(out, x.astype(np.float64) @ w)


def test_batched_matmul_keeps_the_batch_split():
    mesh = kiln.make_mesh((4,), ("i",))
    a, b = _rand(4, 3, 5), _rand(4, 5, 2, seed=1)
    out, plan = _run(lambda u, v: jnp.einsum("bij,bjk->bik", u, v), _put(a, mesh, "i"), jnp.asarray(b))
    assert plan.collectives == [] and out.sharding.spec == P("i")
    _close(out, np.einsum("bij,bjk->bik", a.astype(np.float64), b))


# ---- an MLP step ----

def _mlp_loss(p, x, y):
    h = jnp.tanh(x @ p["w1"] + p["b1"])
    o = h @ p["w2"] + p["b2"]
    return jnp.mean((o - y) ** 2)


def _mlp_step(p, x, y):
    loss, g = kiln.value_and_grad(_mlp_loss)(p, x, y)
    return loss, g, kiln.tree_util.tree_map(lambda a, b: a - 0.1 * b, p, g)


@pytest.mark.parametrize("shape,names", MESHES_1D + [((2, 4), ("x", "y"))])
def test_mlp_forward_and_grad_step_with_batch_split_input(shape, names):
    mesh = kiln.make_mesh(shape, names)
    batch = names if len(names) == 1 else (("x", "y"),)
    p = {"w1": _rand(5, 16), "b1": _rand(16, seed=1), "w2": _rand(16, 3, seed=2), "b2": _rand(3, seed=3)}
    x, y = _rand(32, 5, seed=4), _rand(32, 3, seed=5)
    rep, data = NamedSharding(mesh, P()), NamedSharding(mesh, P(*batch))
    params = {k: jnp.asarray(v) for k, v in p.items()}
    out, plan = _run(_mlp_step, params, jnp.asarray(x), jnp.asarray(y), in_shardings=(rep, data, data))
    want = kiln.jit(_mlp_step)(params, jnp.asarray(x), jnp.asarray(y))
    for got, exp in zip(kiln.tree_util.tree_leaves(out), kiln.tree_util.tree_leaves(want)):
        _close(got, exp, 1e-4)
    assert "all_gather" not in _kinds(plan) and plan.replicated == []
    assert set(_kinds(plan)) == {"psum"}  # the loss and the weight gradients summed over the batch pieces
    for leaf in kiln.tree_util.tree_leaves(out):
        assert leaf.sharding.spec == P()  # the gradients and new parameters are replicated
    # the loss against NumPy in float64
    x64 = x.astype(np.float64)
    h = np.tanh(x64 @ p["w1"] + p["b1"])
    _close(out[0], np.mean((h @ p["w2"] + p["b2"] - y) ** 2), 1e-5)


def test_mlp_step_on_sharded_arguments_under_plain_jit():
    mesh = kiln.make_mesh((8,), ("i",))
    p = {"w1": _rand(5, 16), "b1": _rand(16, seed=1), "w2": _rand(16, 3, seed=2), "b2": _rand(3, seed=3)}
    x, y = _rand(32, 5, seed=4), _rand(32, 3, seed=5)
    params = {k: _put(v, mesh) for k, v in p.items()}
    step = kiln.jit(_mlp_step)
    before = partition.stats["partitioned"]
    for _ in range(2):  # the new parameters (replicated ShardedArrays) feed the next step
        loss, g, params2 = step(params, _put(x, mesh, "i"), _put(y, mesh, "i"))
    assert partition.stats["partitioned"] == before + 2
    want = kiln.jit(_mlp_step)({k: jnp.asarray(v) for k, v in p.items()}, jnp.asarray(x), jnp.asarray(y))
    for got, exp in zip(kiln.tree_util.tree_leaves((loss, g, params2)), kiln.tree_util.tree_leaves(want)):
        _close(got, exp, 1e-4)
    loss3, _, _ = step(params2, _put(x, mesh, "i"), _put(y, mesh, "i"))
    assert partition.stats["partitioned"] == before + 3
    assert float(loss3) < float(loss)


# ---- reshape / transpose ----

@pytest.mark.parametrize("shape,names", MESHES_1D + [((2, 4), ("x", "y"))])
def test_reshape_and_transpose(shape, names):
    mesh = kiln.make_mesh(shape, names)
    x = _rand(16, 8)
    spec = names if len(names) == 2 else (names[0],)
    out, plan = _run(lambda a: (a.reshape(2, 8, 8).transpose(2, 0, 1), a.T, a.reshape(128)), _put(x, mesh, *spec))
    _close(out[0], x.reshape(2, 8, 8).transpose(2, 0, 1))
    _close(out[1], x.T)
    _close(out[2], x.reshape(128))
    if len(names) == 1:
        k = shape[0]
        # (16,) rows split k ways -> (2, 8): the 2-long axis holds the split only when k divides 2
        assert out[0].sharding.spec == (P(None, "i") if k == 2 else P())
        assert out[1].sharding.spec == P(None, "i") and out[2].sharding.spec == P("i")
    else:
        # rows (16, split 2 ways) -> the 2-long axis; columns (8, split 4 ways) -> the last 8-long axis
        assert out[0].sharding.spec == P("y", "x") and out[1].sharding.spec == P("y", "x")
        assert out[2].sharding.spec == P("x")  # the column split cannot survive flattening: gathered
        assert ("all_gather", "reshape", ("y",)) in plan.collectives


def test_reshape_split_into_and_merged_from_two_axes():
    mesh = kiln.make_mesh((4,), ("i",))
    x = _rand(32, 3)
    out, plan = _run(lambda a: a.reshape(8, 4, 3).reshape(32, 3) + 1, _put(x, mesh, "i"))
    assert plan.collectives == [] and out.sharding.spec == P("i")
    _close(out, x + 1)


# ---- out_shardings ----

def test_out_shardings_force_a_reshard():
    mesh = kiln.make_mesh((2, 4), ("x", "y"))
    x = _rand(8, 8)
    want = NamedSharding(mesh, P(None, ("x", "y")))
    out, plan = _run(lambda a: jnp.sin(a), _put(x, mesh, "x"), out_shardings=want)
    assert out.sharding == want
    assert plan.collectives == [("all_gather", "output", ("x",))]
    _close(out, np.sin(x.astype(np.float64)))
    for sh in out.addressable_shards:
        assert sh.data.shape == (8, 1)
        _close(sh.data, np.sin(x[sh.index]))
    rep = NamedSharding(mesh, P())
    out, plan = _run(lambda a: a * 2, _put(x, mesh, "x", "y"), out_shardings=rep)
    assert out.sharding == rep and sorted(_kinds(plan)) == ["all_gather", "all_gather"]
    _close(out, 2 * x)


def test_in_shardings_split_plain_arguments():
    mesh = kiln.make_mesh((4,), ("i",))
    x = _rand(8, 4)
    sh = NamedSharding(mesh, P("i"))
    out, plan = _run(lambda a: a + 1, x, in_shardings=sh, out_shardings=sh)
    assert out.sharding == sh and plan.in_layouts == [(("i",), ())]
    _close(out, x + 1)
    with pytest.raises(ValueError, match="multiple of 4"):
        kiln.jit(lambda a: a, in_shardings=sh)(np.ones((6, 4), np.float32))


# ---- what runs replicated, what falls back ----

def test_primitives_without_a_rule_run_on_gathered_operands():
    mesh = kiln.make_mesh((4,), ("i",))
    x = _rand(8, 4)
    out, plan = _run(lambda a: jnp.sort(a, axis=0) * 2, _put(x, mesh, "i"))
    assert "sort" in plan.replicated and ("all_gather", "sort", ("i",)) in plan.collectives
    _close(out, np.sort(x, axis=0) * 2)
    out, plan = _run(lambda a: jnp.cumsum(a, axis=1), _put(x, mesh, "i"))  # along an unsplit axis: stays split
    assert plan.collectives == [] and out.sharding.spec == P("i")
    _close(out, np.cumsum(x, axis=1), 1e-5)


def test_control_flow_falls_back_to_the_gathered_path_with_the_right_answer():
    mesh = kiln.make_mesh((4,), ("i",))
    x = _rand(8, 4)
    before = dict(partition.stats)
    out = kiln.jit(lambda a: lax.fori_loop(0, 3, lambda i, v: v * 2, a))(_put(x, mesh, "i"))
    assert partition.stats["fallback"] > before["fallback"] and partition.stats["partitioned"] == before["partitioned"]
    _close(out, x * 8)


def test_disable_switch_takes_the_gathered_path(monkeypatch):
    monkeypatch.setenv("KILN_DISABLE_PARTITION", "1")
    mesh = kiln.make_mesh((4,), ("i",))
    x = _rand(8, 4)
    before = partition.stats["partitioned"]
    out = kiln.jit(lambda a: a + 1)(_put(x, mesh, "i"))
    assert partition.stats["partitioned"] == before
    _close(out, x + 1)


def test_static_arguments_keywords_and_closed_over_constants():
    mesh = kiln.make_mesh((4,), ("i",))
    x, c = _rand(8, 4), _rand(8, 4, seed=3)
    cc = jnp.asarray(c)

    def f(a, n, *, b):
        return a * n + b + cc
    g = kiln.jit(f, static_argnums=1)
    before = partition.stats["partitioned"]
    out = g(_put(x, mesh, "i"), 3, b=_put(x, mesh, "i"))
    out2 = g(_put(x, mesh, "i"), 3, b=_put(x, mesh, "i"))
    assert partition.stats["partitioned"] == before + 2 and out.sharding.spec == P("i")
    _close(out, x * 4 + c)
    _close(out2, out)


def test_slice_pad_concatenate_rev_argmax_keep_the_split_of_untouched_axes():
    mesh = kiln.make_mesh((2, 4), ("x", "y"))
    x = _rand(8, 16)

    def f(a):
        return (a[:, 2:10], jnp.pad(a, ((0, 0), (1, 2))), jnp.concatenate([a, a * 2], axis=1), jnp.flip(a, 1),
                jnp.argmax(a, axis=1), a[1:5], jnp.flip(a, 0))
    out, plan = _run(f, _put(x, mesh, "x", "y"))
    wants = (x[:, 2:10], np.pad(x, ((0, 0), (1, 2))), np.concatenate([x, x * 2], axis=1), x[:, ::-1],
             np.argmax(x, axis=1), x[1:5], x[::-1])
    for o, w in zip(out, wants):
        _close(o, w)
    # the rows stay split where only the columns are touched, and the other way round
    assert [o.sharding.spec for o in out] == [P("x"), P("x"), P("x"), P("x"), P("x"), P(None, "y"), P(None, "y")]
    assert plan.replicated == []


def test_dot_general_conflicts_are_resolved_by_gathering():
    mesh = kiln.make_mesh((2, 4), ("x", "y"))
    x, w = _rand(8, 16), _rand(16, 8, seed=1)
    # both free axes split over "y": the lhs keeps it, the rhs's is gathered
    out, plan = _run(lambda a, b: a @ b, _put(x, mesh, "y"), _put(w, mesh, None, "y"))
    assert out.sharding.spec == P("y") and plan.collectives == [("all_gather", "dot_general", ("y",))]
    _close(out, x.astype(np.float64) @ w)
    # contracting axes split differently: the lhs's split wins, the rhs is gathered and cut to it
    out, plan = _run(lambda a, b: a @ b, _put(x, mesh, None, "x"), _put(w, mesh, "y"))
    assert plan.collectives == [("all_gather", "dot_general", ("y",)), ("psum", "dot_general", ("x",))]
    assert out.sharding.spec == P()
    _close(out, x.astype(np.float64) @ w)
    # batch axes split differently
    a, b = _rand(4, 3, 8), _rand(4, 8, 2, seed=1)
    out, plan = _run(lambda u, v: jnp.einsum("bij,bjk->bik", u, v), _put(a, mesh, "x"), _put(b, mesh, "y"))
    assert out.sharding.spec == P("x")
    _close(out, np.einsum("bij,bjk->bik", a.astype(np.float64), b))


def test_an_axis_split_over_two_mesh_axes_in_either_order():
    mesh = kiln.make_mesh((2, 4), ("x", "y"))
    x = _rand(32, 3)
    for names in (("x", "y"), ("y", "x")):
        xs = _put(x, mesh, names)
        out, plan = _run(lambda a: a.reshape(8, 4, 3) * 2, xs)
        assert out.sharding.spec == P(names) and plan.collectives == []
        for sh in out.addressable_shards:
            _close(sh.data, 2 * x.reshape(8, 4, 3)[sh.index])
        out, plan = _run(lambda a: a + 1, xs, out_shardings=NamedSharding(mesh, P()))
        assert plan.collectives == [("all_gather", "output", names)]
        for sh in out.addressable_shards:
            _close(sh.data, x + 1)


def test_gather_indexing_and_random_bits_run_whole_and_stay_correct():
    mesh = kiln.make_mesh((4,), ("i",))
    x = _rand(8, 16)
    out, plan = _run(lambda a: a[jnp.array([0, 3, 5])] * 2, _put(x, mesh, "i"))
    assert plan.replicated == ["take"] and out.sharding.spec == P()
    _close(out, x[[0, 3, 5]] * 2)

    def noisy(a):
        return a + kiln.random.normal(kiln.random.PRNGKey(0), a.shape)
    out, plan = _run(noisy, _put(x, mesh, "i"))
    assert out.sharding.spec == P("i") and plan.collectives == []
    _close(out, kiln.jit(noisy)(jnp.asarray(x)))


def test_a_rule_failure_warns_and_falls_back_with_the_right_answer(monkeypatch):
    def broken(lw, prim, ins, params, outs):
        raise RuntimeError("a rule that fails")
    monkeypatch.setitem(partition._RULES, "sin", broken)
    mesh = kiln.make_mesh((4,), ("i",))
    x = _rand(8, 4)
    before = partition.stats["fallback"]
    with pytest.warns(RuntimeWarning, match="a rule that fails"):
        out = kiln.jit(lambda a: jnp.sin(a) + 1)(_put(x, mesh, "i"))
    assert partition.stats["fallback"] == before + 1
    _close(out, np.sin(x) + 1)


def test_weights_split_over_the_data_axis_are_gathered_not_the_batch():
    mesh = kiln.make_mesh((4,), ("i",))
    x, w = _rand(16, 8), _rand(8, 4, seed=1)
    out, plan = _run(lambda a, b: a @ b, _put(x, mesh, "i"), _put(w, mesh, "i"))
    assert plan.collectives == [("all_gather", "dot_general", ("i",))] and out.sharding.spec == P("i")
    _close(out, x.astype(np.float64) @ w)
