"""The combine pass (transforms/combine.c, KILN_COMBINE_COLLECTIVES=1): psums over the same axes
whose results are read only after the last of them become one psum of their operands joined; one
whose result another reads first stays apart. The joined program gives the same bits, and its
compiled form (KILN_DUMP) holds the one joined psum. Runs on 4 simulated CPU devices."""
import glob

import numpy as np
import pytest

import kiln
from kiln import lax
from kiln.sharding import Mesh, PartitionSpec as P

CPUS = kiln.devices("cpu")
pytestmark = pytest.mark.skipif(len(CPUS) < 4, reason="needs KILN_NUM_CPU_DEVICES >= 4 (tests/conftest.py sets 8)")


def body(v):
    a = lax.psum(v, "d")
    b = lax.psum(a * 2 + v, "d")  # reads a: a stays apart
    c = lax.psum(v[:, :2] * 3, "d")  # joins b (both read only at the end), another shape
    return a + b + c.sum(1, keepdims=True)


def run(x):
    mesh = Mesh(np.array(CPUS[:4]), ("d",))
    return np.asarray(kiln.shard_map(body, mesh=mesh, in_specs=P("d"), out_specs=P("d"), check_vma=False)(x))


def test_independent_psums_join_and_give_the_same_bits(monkeypatch, tmp_path):
    x = np.random.default_rng(1).standard_normal((8, 3)).astype(np.float32)
    monkeypatch.delenv("KILN_COMBINE_COLLECTIVES", raising=False)
    apart = run(x)
    monkeypatch.setenv("KILN_COMBINE_COLLECTIVES", "1")
    monkeypatch.setenv("KILN_DUMP", str(tmp_path))
    joined = run(x + 0)  # (a fresh trace: shard_map compiles per call site and shapes)
    np.testing.assert_array_equal(apart, joined)
    blocks = x.reshape(4, 2, 3)
    a = blocks.sum(0)
    want = a + (2 * a[None] + blocks).sum(0) + (3 * blocks[:, :, :2]).sum(0).sum(1, keepdims=True)
    np.testing.assert_allclose(joined, np.tile(want, (4, 1)), rtol=1e-5, atol=1e-5)
    dumps = [open(p).read() for p in sorted(glob.glob(str(tmp_path / "*-combine.txt")))]
    assert dumps, "the combine pass did not run"
    assert dumps[-1].count(" psum[") == 2 and "concatenate" in dumps[-1]


def mlp_step(params, x, y):
    def loss(params, x, y):
        h = x
        for i, (w, b) in enumerate(params):
            h = h @ w + b
            if i < len(params) - 1:
                h = kiln.numpy.tanh(h)
        return ((h - y) ** 2).mean()

    g = lax.pmean(kiln.grad(loss)(params, x, y), "d")
    return [(w - 0.1 * gw, b - 0.1 * gb) for (w, b), (gw, gb) in zip(params, g)]


def mlp_problem(seed):
    """Parameters of a 5 -> 7 -> 6 -> 3 MLP and a batch of 8 (2 rows a device of 4)."""
    rng = np.random.default_rng(seed)
    sizes = (5, 7, 6, 3)
    params = [(rng.standard_normal((m, n)).astype(np.float32), rng.standard_normal(n).astype(np.float32))
              for m, n in zip(sizes[:-1], sizes[1:])]
    return params, rng.standard_normal((8, 5)).astype(np.float32), rng.standard_normal((8, 3)).astype(np.float32)


def test_hoist_puts_each_psum_right_after_its_operand(monkeypatch, tmp_path):
    """A data-parallel step's gradient psums follow the equations computing their operands (the
    backward pass's later matmuls come after them), and the step computes what NumPy does."""
    params, x, y = mlp_problem(2)
    monkeypatch.setenv("KILN_DUMP", str(tmp_path))
    mesh = Mesh(np.array(CPUS[:4]), ("d",))
    f = kiln.jit(kiln.shard_map(mlp_step, mesh=mesh, in_specs=(P(), P("d"), P("d")), out_specs=P()))
    got = f(params, x, y)
    dumps = sorted(glob.glob(str(tmp_path / "*-hoist.txt")))
    assert dumps, "the hoist pass did not run"
    lines = [ln.strip() for ln in open(dumps[-1]).read().splitlines() if " = " in ln]
    defined = {}
    for i, ln in enumerate(lines):
        for name in ln.split(" = ")[0].split():
            defined[name.split(":")[0]] = i
    psums = [i for i, ln in enumerate(lines) if " = psum[" in ln]
    assert len(psums) == 6
    for i in psums:
        operand = lines[i].split("] ")[-1].split()[0]
        j = defined[operand]
        assert all(" = psum[" in ln for ln in lines[j + 1:i]), (lines[j], lines[i])
    # the first layer's weight gradient is the last matmul; the others' psums come before it
    dots = [i for i, ln in enumerate(lines) if "dot_general" in ln]
    assert sum(p < dots[-1] for p in psums) >= 4
    # a weight gradient's matmul moves up with its psum, ahead of the activation gradient beside it
    # (the middle layer's dW, f32[7,6], and its psum before dh of the first layer, f32[2,7])
    dw2 = next(i for i in dots if ":f32[7,6] = " in lines[i])
    dh1 = max(i for i in dots if ":f32[2,7] = " in lines[i])
    psum_dw2 = next(i for i in psums if lines[i].split("] ")[-1].split()[0] == lines[dw2].split(":")[0])
    assert dw2 < psum_dw2 < dh1, (dw2, psum_dw2, dh1)
    # the step against NumPy in float64: under check_vma the gradient of the replicated parameters
    # is already summed over the shards (pvary's transpose), so pmean leaves the sum of the
    # per-shard means' gradients
    p64 = [(w.astype(np.float64), b.astype(np.float64)) for w, b in params]
    hs, h = [x.astype(np.float64)], x.astype(np.float64)
    for i, (w, b) in enumerate(p64):
        h = h @ w + b
        if i < 2:
            h = np.tanh(h)
        hs.append(h)
    d = 2 * (h - y) / (2 * 3)  # d(mean over a shard's 2 x 3)/dh
    want = [None] * 3
    for i in range(2, -1, -1):
        w, b = p64[i]
        want[i] = (w - 0.1 * hs[i].T @ d, b - 0.1 * d.sum(0))
        if i:
            d = (d @ w.T) * (1 - hs[i] ** 2)
    for (gw, gb), (ww, wb) in zip(got, want):
        np.testing.assert_allclose(np.asarray(gw), ww, rtol=1e-5, atol=1e-5)
        np.testing.assert_allclose(np.asarray(gb), wb, rtol=1e-5, atol=1e-5)


def assert_same_step(step, mesh, params, x, y, got):
    """step traced afresh (x + 0: shard_map compiles per call site) gives got's bits."""
    other = kiln.jit(kiln.shard_map(step, mesh=mesh, in_specs=(P(), P("d"), P("d")), out_specs=P()))(params, x + 0, y)
    for (w, b), (w2, b2) in zip(got, other):
        np.testing.assert_array_equal(np.asarray(w), np.asarray(w2))
        np.testing.assert_array_equal(np.asarray(b), np.asarray(b2))


def weight_first_step(params, x, y):
    """mlp_step with each layer written w^T h^T (the activation gradient's matmul then comes
    before the weight gradient's in the traced backward pass)."""
    def loss(params, x, y):
        h = x
        for i, (w, b) in enumerate(params):
            h = lax.dot_general(w, h, (((0,), (1,)), ((), ()))).T + b
            if i < len(params) - 1:
                h = kiln.numpy.tanh(h)
        return ((h - y) ** 2).mean()

    g = lax.pmean(kiln.grad(loss)(params, x, y), "d")
    return [(w - 0.1 * gw, b - 0.1 * gb) for (w, b), (gw, gb) in zip(params, g)]


@pytest.mark.parametrize("leads", ["1", "0"])
def test_hoist_moves_a_weight_gradient_up_with_its_psum(monkeypatch, tmp_path, leads):
    """The weight gradient's matmul (and what scales or sums it) moves up with its psum, ahead of
    the activation gradient traced before it, so that the all-reduce overlaps that matmul
    (KILN_HOIST_LEADS=0 moves the psums alone: the activation gradient then stays first). The
    step's bits do not change."""
    params, x, y = mlp_problem(3)
    mesh = Mesh(np.array(CPUS[:4]), ("d",))
    monkeypatch.setenv("KILN_HOIST_LEADS", leads)
    monkeypatch.setenv("KILN_DUMP", str(tmp_path))
    got = kiln.jit(kiln.shard_map(weight_first_step, mesh=mesh, in_specs=(P(), P("d"), P("d")), out_specs=P()))(
        params, x, y)
    lines = [ln.strip() for ln in open(sorted(glob.glob(str(tmp_path / "*-hoist.txt")))[-1]).read().splitlines()
             if " = " in ln]
    dw2 = next(i for i, ln in enumerate(lines) if ":f32[7,6] = dot_general" in ln)
    dh1 = next(i for i, ln in enumerate(lines) if ":f32[2,7] = dot_general" in ln)  # (the forward's are [7,2])
    psum_dw2 = next(i for i, ln in enumerate(lines) if " = psum[" in ln and ln.split("] ")[-1].split()[0] ==
                    lines[dw2].split(":")[0])
    if leads == "1":
        assert dw2 < psum_dw2 < dh1, (dw2, psum_dw2, dh1)
    else:
        assert dh1 < dw2 < psum_dw2, (dw2, psum_dw2, dh1)
    monkeypatch.setenv("KILN_HOIST_LEADS", "0" if leads == "1" else "1")
    assert_same_step(weight_first_step, mesh, params, x, y, got)


def psum_keys(lines):
    """Per equation of a dumped program: the index of the latest psum it depends on (-1: none)."""
    latest, keys = {}, []
    for i, ln in enumerate(lines):
        outs, rhs = ln.split(" = ", 1)
        args = rhs.split("] ")[-1].split() if "[" in rhs.split()[0] else rhs.split()[1:]
        keys.append(max([latest.get(a, -1) for a in args] + [-1]))
        for name in outs.split():
            latest[name.split(":")[0]] = i if rhs.startswith("psum[") else keys[-1]
    return keys


@pytest.mark.parametrize("sink", ["1", "0"])
def test_sink_puts_readers_of_a_psum_after_the_work_that_needs_none(monkeypatch, tmp_path, sink):
    """The waits sink (on by default; KILN_SINK_WAITS=0 turns it off): equations that read no
    psum's result come before any that does, and those that do are ordered by the latest psum they
    wait for, so the last all-reduce of a data-parallel step overlaps the other parameters' updates
    (with it off, the updates stay in the parameters' order, the first layer's first). Same bits."""
    params, x, y = mlp_problem(4)
    mesh = Mesh(np.array(CPUS[:4]), ("d",))
    monkeypatch.setenv("KILN_SINK_WAITS", sink)
    monkeypatch.setenv("KILN_DUMP", str(tmp_path))
    got = kiln.jit(kiln.shard_map(mlp_step, mesh=mesh, in_specs=(P(), P("d"), P("d")), out_specs=P()))(params, x, y)
    lines = [ln.strip() for ln in open(sorted(glob.glob(str(tmp_path / "*-hoist.txt")))[-1]).read().splitlines()
             if " = " in ln]
    keys = psum_keys(lines)
    updates = [i for i, ln in enumerate(lines) if " = sub " in ln and keys[i] >= 0]
    shapes = [lines[i].split(":")[1].split(" ")[0] for i in updates]
    if sink == "1":
        assert keys == sorted(keys), "a reader of a psum comes before work that needs none"
        assert shapes[-1] == "f32[5,7]", shapes  # the first layer's weight, whose psum is the last
    else:
        assert keys != sorted(keys)
        assert shapes[0] == "f32[5,7]", shapes
    monkeypatch.setenv("KILN_SINK_WAITS", "0" if sink == "1" else "1")
    assert_same_step(mlp_step, mesh, params, x, y, got)


def test_sink_keeps_the_order_of_effects(capfd):
    """A print that reads a psum's result and a later one that reads none print in program order on
    every device (the devices' lines may interleave; each is whole)."""
    def body(v):
        s = lax.psum(v, "d")
        i = lax.axis_index("d")
        kiln.debug.print("first {} {}", i, s.sum())
        kiln.debug.print("second {} {}", i, (v * 2).sum())
        return s

    mesh = Mesh(np.array(CPUS[:4]), ("d",))
    x = np.arange(8, dtype=np.float32).reshape(8, 1)
    out = kiln.jit(kiln.shard_map(body, mesh=mesh, in_specs=P("d"), out_specs=P("d")))(x)
    kiln.block_until_ready(out)
    lines = capfd.readouterr().out.splitlines()
    for d in range(4):
        mine = [ln for ln in lines if ln.split()[:2] in (["first", str(d)], ["second", str(d)])]
        assert mine == [f"first {d} 28.0", f"second {d} {8.0 * d + 2.0}"], lines
