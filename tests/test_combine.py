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
