"""JAX's top-level names kiln provides: configuration contexts, single-process facts, modules
(sharding, dtypes, experimental, profiler, stages, custom_derivatives), and the multi-device
names that raise NotImplementedError until kiln runs on several devices."""
import numpy as np
import pytest

import kiln
import kiln.numpy as jnp


def test_configuration_contexts():
    assert jnp.ones(2).dtype == np.float32
    with kiln.enable_x64():
        assert jnp.ones(2).dtype == np.float64
        with kiln.enable_x64(False):
            assert jnp.ones(2).dtype == np.float32
    assert jnp.ones(2).dtype == np.float32
    f = kiln.jit(lambda x: jnp.log(x))
    with kiln.debug_nans():
        with pytest.raises(FloatingPointError, match="log"):
            f(-jnp.ones(2))
    assert np.isnan(np.asarray(f(-jnp.ones(2)))).all()
    with kiln.log_compiles(), kiln.check_tracer_leaks(), kiln.numpy_rank_promotion("raise"), kiln.transfer_guard("allow"):
        assert float(kiln.jit(lambda x: x * 2)(3.0)) == 6.0
    with kiln.experimental.enable_x64():
        assert jnp.ones(1).dtype == np.float64


def test_process_facts_modules_and_refs(capsys, tmp_path):
    assert kiln.process_index() == 0 and kiln.process_count() == 1 and kiln.host_count() == 1
    assert kiln.version.__version__ == kiln.__version__ and kiln.version.__version_info__ == kiln.__version_info__
    assert kiln.float0.itemsize == 0
    kiln.print_environment_info()
    assert "kiln:" in capsys.readouterr().out
    x = jnp.ones(3)
    assert isinstance(x.sharding, kiln.sharding.SingleDeviceSharding)
    assert kiln.P("x", None) == ("x", None) and repr(kiln.P("x")) == "PartitionSpec('x',)"
    assert kiln.dtypes.canonicalize_dtype(np.float64) == np.float32
    assert kiln.custom_derivatives.custom_jvp is kiln.custom_jvp
    with kiln.profiler.trace(str(tmp_path)), kiln.profiler.TraceAnnotation("step"):  # (writes a real trace)
        assert float(jnp.sum(x)) == 3.0
    assert isinstance(kiln.jit(lambda v: v).lower(x), kiln.stages.Lowered)
    r = kiln.empty_ref(kiln.ShapeDtypeStruct((2,), np.float32))
    r[0] = 5.0
    np.testing.assert_array_equal(np.asarray(kiln.freeze(r)), [5.0, 0.0])
    with kiln.default_device(kiln.devices()[0]):
        assert float(jnp.sum(x)) == 3.0
    assert kiln.copy_to_host_async(x) is x


def test_smap_needs_out_axes_and_axis_name_and_set_mesh_a_mesh():
    # smap, pmap, shard_map, make_mesh, Mesh, set_mesh, reshard and the array builders exist
    # (tests/test_smap.py, tests/test_sharding.py, tests/test_mesh_utils.py)
    with pytest.raises(TypeError, match="out_axes|axis_name"):
        kiln.smap(lambda x: x)
    with pytest.raises(TypeError, match="set_mesh: expected a Mesh"):
        kiln.set_mesh(lambda x: x)


def test_debug_nans_sees_eager_grad_vjp_jvp_and_vmap():
    # bug (issue 32): jax_debug_nans missed NaNs made in eager grad's backward pass, jvp's tangents and eager
    # vmap's batch (compiled programs run unchecked); JAX runs those op by op and raises at the first NaN.
    # Placeholder zero cotangents (vjp's primal run, linearize) must not trip it (0 * inf).
    import numpy as np
    import kiln.numpy as jnp
    x = jnp.asarray([0.0, 1.0])
    with kiln.debug_nans(True):
        for f in (lambda: kiln.grad(lambda v: jnp.sum(jnp.where(v > 0, jnp.sqrt(v), 0.0)))(x),
                  lambda: kiln.jvp(jnp.sqrt, (x,), (jnp.zeros(2),)),
                  lambda: kiln.vmap(lambda v: jnp.log(v - 2))(x),
                  lambda: kiln.jacrev(lambda v: jnp.where(v > 0, jnp.sqrt(v), 0.0))(x)):
            with pytest.raises(FloatingPointError, match="nan"):
                f()
        out, f_vjp = kiln.vjp(jnp.sqrt, x)
        assert np.asarray(f_vjp(jnp.ones(2))[0]).tolist() == [np.inf, 0.5]
        out, f_jvp = kiln.linearize(jnp.sqrt, x)
        assert np.asarray(f_jvp(jnp.ones(2))).tolist() == [np.inf, 0.5]
    assert np.isnan(np.asarray(kiln.vmap(lambda v: jnp.log(v - 2))(x))).all()  # off again: no check
