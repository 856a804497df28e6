"""Shared fixtures for kiln's tests."""
import os

# 8 simulated CPU devices for the whole suite (test_sharding.py needs them; every other test runs on
# device 0 as with one device), set before kiln is imported, as XLA's forced host device count.
os.environ.setdefault("KILN_NUM_CPU_DEVICES", "8")

import pytest  # noqa: E402

import kiln  # noqa: E402

# Tests compare against float64 NumPy: on a GPU, matmuls at DEFAULT precision use TF32 (as in JAX),
# which is not what they check. Tests of the precision levels themselves set `precision=` per call.
kiln.config.update("jax_default_matmul_precision", "highest")


@pytest.fixture
def x64():
    """64-bit mode for one test (float64/int64 defaults, as jax_enable_x64), restored afterwards."""
    old = kiln.config.jax_enable_x64
    kiln.config.update("jax_enable_x64", True)
    yield
    kiln.config.update("jax_enable_x64", old)
