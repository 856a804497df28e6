"""examples/data_parallel.py (SGD of a small tanh network with its batch split over 8 simulated CPU
devices: shard_map with check_vma's typing, a jit partitioned over the mesh, and one device) gives
JAX's numbers on every road. Needs no JAX: its numbers are pinned below."""
import importlib.util
import os

import numpy as np
import pytest

import kiln
import kiln.numpy as jnp
from kiln import lax

_PATH = os.path.join(os.path.dirname(os.path.abspath(__file__)), "..", "examples", "data_parallel.py")
_spec = importlib.util.spec_from_file_location("data_parallel_example", _PATH)
dp = importlib.util.module_from_spec(_spec)
_spec.loader.exec_module(dp)

# JAX 0.10.2 on the CPU with 8 forced host devices: dp.run(jax, jnp, lax, steps=20)
JAX_LOSSES = [0.8505182862281799, 0.7805343866348267, 0.718010425567627, 0.6619976758956909, 0.6116899251937866,
              0.5663985013961792, 0.5255321264266968, 0.48858097195625305, 0.45510345697402954, 0.4247157573699951,
              0.3970830738544464, 0.3719123601913452, 0.34894639253616333, 0.3279586732387543, 0.3087494671344757,
              0.29114192724227905, 0.2749793231487274, 0.2601223587989807, 0.24644699692726135, 0.2338426560163498]
JAX_W_OUT_ROW0 = [-0.08465828746557236, 0.049257416278123856, -0.17013110220432281, -0.2279655635356903]
JAX_B_HIDDEN_HEAD = [-0.0006171501008793712, 0.00010284565360052511, 0.0016907615354284644, 0.004574727267026901]


@pytest.fixture(scope="module")
def result():
    if len(kiln.devices()) != 8 or kiln.devices()[0].platform != "cpu":
        pytest.skip("pinned for 8 simulated CPU devices (tests/conftest.py)")
    return dp.run(kiln, jnp, lax, steps=20)


def test_every_road_gives_jaxs_losses(result):
    assert result.devices == 8
    for losses in (result.losses, result.losses_jit, result.losses_single):
        np.testing.assert_allclose(losses, JAX_LOSSES, rtol=2e-6)
    assert JAX_LOSSES[-1] < 0.3 * JAX_LOSSES[0]  # it trains


def test_every_road_ends_at_jaxs_parameters(result):
    for params in (result.params, result.params_jit, result.params_single):
        np.testing.assert_allclose(params["out"]["w"][0], JAX_W_OUT_ROW0, rtol=1e-5, atol=1e-7)
        np.testing.assert_allclose(params["hidden"]["b"][:4], JAX_B_HIDDEN_HEAD, rtol=1e-4, atol=1e-8)
    for part in ("hidden", "out"):
        for k in ("w", "b"):
            np.testing.assert_allclose(result.params[part][k], result.params_single[part][k], rtol=1e-5, atol=1e-7)
            np.testing.assert_allclose(result.params_jit[part][k], result.params_single[part][k], rtol=1e-5, atol=1e-7)
