"""Shared fixtures for kiln's tests."""
import pytest

import kiln


@pytest.fixture
def x64():
    """64-bit mode for one test (float64/int64 defaults, as jax_enable_x64), restored afterwards."""
    old = kiln.config.jax_enable_x64
    kiln.config.update("jax_enable_x64", True)
    yield
    kiln.config.update("jax_enable_x64", old)
