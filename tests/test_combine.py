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


def test_hoist_puts_each_psum_right_after_its_operand(monkeypatch, tmp_path):
    """A data-parallel step's gradient psums follow the equations computing their operands (the
    backward pass's later matmuls come after them), and the step computes what NumPy does."""
    rng = np.random.default_rng(2)
    sizes = (5, 7, 6, 3)
    params = [(rng.standard_normal((m, n)).astype(np.float32), rng.standard_normal(n).astype(np.float32))
              for m, n in zip(sizes[:-1], sizes[1:])]
    x = rng.standard_normal((8, 5)).astype(np.float32)
    y = rng.standard_normal((8, 3)).astype(np.float32)
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
