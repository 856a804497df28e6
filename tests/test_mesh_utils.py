"""jax.experimental.mesh_utils / multihost_utils, jax.set_mesh, jax.sharding.reshard and
get_abstract_mesh, jax.debug.visualize_array_sharding: on the 8 simulated CPU devices of the suite
(one process; tests/test_distributed.py runs several)."""
import numpy as np
import pytest

import kiln
from kiln.experimental import mesh_utils, multihost_utils
from kiln.sharding import Mesh, NamedSharding, PartitionSpec as P

N = len(kiln.devices())
pytestmark = pytest.mark.skipif(N < 8 or kiln.devices()[0].platform != "cpu", reason="needs 8 simulated CPU devices")


def test_create_device_mesh_and_hybrid():
    devs = mesh_utils.create_device_mesh((2, 4))
    assert devs.shape == (2, 4) and [d.id for d in devs.flat] == list(range(8))
    with pytest.raises(ValueError, match=r"holds 4 devices, but 8 were given"):
        mesh_utils.create_device_mesh((2, 2))
    assert mesh_utils.create_device_mesh((2, 2), kiln.devices()[:4]).shape == (2, 2)
    hy = mesh_utils.create_hybrid_device_mesh((4, 2), (1, 1))
    assert hy.shape == (4, 2) and [d.id for d in hy.flat] == list(range(8))
    with pytest.raises(ValueError, match="granules"):
        mesh_utils.create_hybrid_device_mesh((2, 2), (2, 1))


def test_visualize_array_sharding_draws_the_blocks(capsys):
    mesh = Mesh(mesh_utils.create_device_mesh((2, 4)), ("x", "y"))
    x = kiln.device_put(np.arange(32.0).reshape(4, 8), NamedSharding(mesh, P("x", "y")))
    kiln.debug.visualize_array_sharding(x)
    rows = [r for r in capsys.readouterr().out.splitlines() if r.startswith("|")]
    assert [r.split("|")[1:-1] for r in rows] == [[f"CPU {i}".center(9) for i in range(4)],
                                                  [f"CPU {i}".center(9) for i in range(4, 8)]]
    kiln.debug.visualize_array_sharding(kiln.device_put(np.arange(8.0), NamedSharding(mesh, P("y"))))
    row = [r for r in capsys.readouterr().out.splitlines() if r.startswith("|")]
    assert row == ["|" + "|".join(f"CPU {i},{i + 4}".center(9) for i in range(4)) + "|"]
    seen = []
    kiln.debug.inspect_array_sharding(x, callback=seen.append)
    kiln.debug.visualize_sharding((8,), NamedSharding(mesh, P(("x", "y"))))
    assert capsys.readouterr().out.count("CPU") == 8
    assert seen == [x.sharding]
    with pytest.raises(ValueError, match="1-D and 2-D"):
        kiln.debug.visualize_array_sharding(kiln.numpy.ones((2, 2, 2)))


def test_set_mesh_reshard_and_get_abstract_mesh():
    mesh = kiln.make_mesh((8,), ("d",))
    assert kiln.sharding.get_abstract_mesh().axis_names == ()
    with pytest.raises(ValueError, match="needs a mesh"):
        kiln.sharding.reshard(np.arange(8.0), P("d"))
    with kiln.set_mesh(mesh):
        assert kiln.sharding.get_abstract_mesh() is mesh
        z = kiln.sharding.reshard(np.arange(8.0), P("d"))
        assert z.sharding == NamedSharding(mesh, P("d"))
        np.testing.assert_array_equal(np.asarray(z), np.arange(8.0))
        # shard_map takes the mesh that was set
        f = kiln.shard_map(lambda a: kiln.lax.psum(a, "d"), in_specs=P("d"), out_specs=P())
        np.testing.assert_array_equal(np.asarray(f(np.arange(8.0))), [28.0])
        # inside jit: the value as it is
        np.testing.assert_array_equal(np.asarray(kiln.jit(lambda v: kiln.reshard(v, P("d")) * 2)(np.ones(8))),
                                      2 * np.ones(8))
    assert kiln.sharding.get_abstract_mesh().axis_names == ()
    a = kiln.make_array_from_process_local_data(NamedSharding(mesh, P("d")), np.arange(16.0))
    assert a.sharding.spec == P("d") and np.asarray(a).tolist() == list(np.arange(16.0))


def test_multihost_utils_with_one_process():
    g = multihost_utils.process_allgather({"a": np.arange(3.0), "b": kiln.numpy.ones(2)})
    assert g["a"].shape == (1, 3) and g["b"].shape == (1, 2)
    np.testing.assert_array_equal(multihost_utils.process_allgather(np.arange(3.0), tiled=True), np.arange(3.0))
    np.testing.assert_array_equal(multihost_utils.broadcast_one_to_all(np.arange(4)), np.arange(4))
    multihost_utils.sync_global_devices("here")
    multihost_utils.assert_equal(np.arange(3))


def test_ragged_all_to_all_names_itself():
    with pytest.raises(NotImplementedError, match="ragged_all_to_all"):
        kiln.lax.ragged_all_to_all(None, None, None, None, None, None, axis_name="d")
