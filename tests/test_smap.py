"""kiln.smap (jax.smap): shard_map over one axis of the context mesh, arguments split along their
in_axes entries and results joined along out_axes. Values checked against NumPy; the same cases
were compared with JAX 0.10's smap on 8 CPU devices (equal). Runs on the simulated CPU devices."""
import numpy as np
import pytest

import kiln
from kiln import lax
from kiln.sharding import Mesh, PartitionSpec as P  # noqa: F401

CPUS = kiln.devices("cpu")
pytestmark = pytest.mark.skipif(len(CPUS) < 8, reason="needs KILN_NUM_CPU_DEVICES=8 (tests/conftest.py sets it)")


def x_of(rows=8, cols=6):
    return np.random.default_rng(3).standard_normal((rows, cols)).astype(np.float32)


def test_psum_over_the_mapped_axis():
    x = x_of()
    with kiln.set_mesh(Mesh(np.array(CPUS[:4]), ("x",))):
        got = kiln.smap(lambda v: lax.psum(v, "x"), in_axes=0, out_axes=0, axis_name="x")(x)
    np.testing.assert_allclose(np.asarray(got), np.tile(x.reshape(4, 2, 6).sum(0), (4, 1)), rtol=1e-5, atol=1e-5)


def test_axes_other_than_the_first_and_unmapped_arguments():
    x = x_of(8, 4)
    with kiln.set_mesh(Mesh(np.array(CPUS[:4]), ("x",))):
        got = kiln.smap(lambda v, w: v * w + lax.axis_index("x"), in_axes=(1, None), out_axes=1, axis_name="x")(
            x, np.float32(2))
    np.testing.assert_allclose(np.asarray(got), x * 2 + np.arange(4, dtype=np.float32), rtol=1e-6)


def test_pytree_axes_and_a_replicated_result():
    x = x_of()
    with kiln.set_mesh(Mesh(np.array(CPUS[:4]), ("x",))):
        got = kiln.smap(lambda d: {"a": d["a"] * 2, "b": lax.pmean(d["b"], "x")}, in_axes=({"a": 0, "b": 0},),
                        out_axes={"a": 0, "b": None}, axis_name="x")({"a": x, "b": x})
    np.testing.assert_allclose(np.asarray(got["a"]), 2 * x, rtol=1e-6)
    np.testing.assert_allclose(np.asarray(got["b"]), x.reshape(4, 2, 6).mean(0), rtol=1e-5, atol=1e-6)


def test_one_axis_of_a_two_axis_mesh():
    x = x_of()
    with kiln.set_mesh(Mesh(np.array(CPUS[:8]).reshape(2, 4), ("x", "y"))):
        got = kiln.smap(lambda v: lax.psum(v, "y"), in_axes=0, out_axes=0, axis_name="y")(x)
    np.testing.assert_allclose(np.asarray(got), np.tile(x.reshape(4, 2, 6).sum(0), (4, 1)), rtol=1e-5, atol=1e-5)


def test_decorator_form_and_errors():
    x = x_of()
    f = kiln.smap(in_axes=0, out_axes=0, axis_name="x")(lambda v: v + 1)
    with kiln.set_mesh(Mesh(np.array(CPUS[:4]), ("x",))):
        np.testing.assert_allclose(np.asarray(f(x)), x + 1)
        with pytest.raises(NotImplementedError, match="in_axes inferred"):
            kiln.smap(lambda v: v, out_axes=0, axis_name="x")(x)
        with pytest.raises(NotImplementedError, match="negative out_axes"):
            kiln.smap(lambda v: v, in_axes=0, out_axes=-1, axis_name="x")(x)
        with pytest.raises(ValueError, match="in_axes has 2 entries for 1"):
            kiln.smap(lambda v: v, in_axes=(0, 0), out_axes=0, axis_name="x")(x)
        with pytest.raises(ValueError, match="out of range"):
            kiln.smap(lambda v: v, in_axes=2, out_axes=0, axis_name="x")(x)
    with pytest.raises(ValueError, match="no mesh"):
        f(x)
