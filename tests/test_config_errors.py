"""kiln._src.config (options, validation, change callbacks, env defaults) and
kiln.errors (JAX's exception hierarchy and messages that name the fix)."""

import os
import subprocess
import sys

import numpy as np
import pytest

from kiln import errors
from kiln._src import config as config_module
from kiln._src.config import config


@pytest.fixture
def restore_x64():
    old = config.jax_enable_x64
    yield
    config.update("jax_enable_x64", old)


def test_update_and_read(restore_x64):
    config.update("jax_enable_x64", True)
    assert config.jax_enable_x64 is True
    assert config.read("jax_enable_x64") is True
    config.update("jax_enable_x64", False)
    assert config.jax_enable_x64 is False
    assert config.read("jax_enable_x64") is False
    config.update("jax_enable_x64", 1)  # 0/1 are accepted as bools
    assert config.jax_enable_x64 is True


def test_unknown_option_and_bad_value(restore_x64):
    # JAX's class and words: AttributeError "Unrecognized config option: <name>"
    with pytest.raises(AttributeError, match="Unrecognized config option: jax_no_such_flag"):
        config.update("jax_no_such_flag", True)
    with pytest.raises(AttributeError, match="jax_no_such_flag"):
        config.read("jax_no_such_flag")
    with pytest.raises(TypeError, match="jax_enable_x64"):
        config.update("jax_enable_x64", "yes")
    with pytest.raises(AttributeError):
        config.jax_no_such_flag = 1


def test_attribute_assignment_goes_through_update(restore_x64):
    seen = []
    callback = config._on_change(lambda name, value, thread_only: seen.append((name, value)))
    try:
        config.update("jax_enable_x64", False)
        config.jax_enable_x64 = True
        assert config.jax_enable_x64 is True
        assert seen == [("jax_enable_x64", True)]
    finally:
        config._callbacks.remove(callback)


def test_callbacks_fire_only_on_change(restore_x64):
    seen = []
    callback = config._on_change(lambda name, value, thread_only: seen.append((name, value)))
    try:
        config.update("jax_enable_x64", False)
        seen.clear()
        config.update("jax_enable_x64", False)  # no change: no call
        assert seen == []
        config.update("jax_enable_x64", True)
        config.update("jax_enable_x64", False)
        assert seen == [("jax_enable_x64", True), ("jax_enable_x64", False)]
    finally:
        config._callbacks.remove(callback)


def test_enable_x64_context_restores(restore_x64):
    config.update("jax_enable_x64", False)
    with config_module.enable_x64():
        assert config.jax_enable_x64 is True
        with config_module.disable_x64():
            assert config.jax_enable_x64 is False
        assert config.jax_enable_x64 is True
    assert config.jax_enable_x64 is False


@pytest.mark.parametrize("env,expected", [
    ({}, False),
    ({"JAX_ENABLE_X64": "1"}, True),
    ({"JAX_ENABLE_X64": "True"}, True),
    ({"JAX_ENABLE_X64": "0"}, False),
    ({"KILN_ENABLE_X64": "true"}, True),
    ({"KILN_ENABLE_X64": "false", "JAX_ENABLE_X64": "1"}, False),  # kiln's wins
])
def test_x64_default_from_environment(env, expected):
    # A fresh interpreter, loading config.py by path so nothing else matters.
    path = config_module.__file__
    code = (
        "import importlib.util, sys\n"
        f"spec = importlib.util.spec_from_file_location('kiln_cfg', {path!r})\n"
        "m = importlib.util.module_from_spec(spec); spec.loader.exec_module(m)\n"
        "print(m.config.jax_enable_x64)\n")
    clean = {k: v for k, v in os.environ.items()
             if k not in ("JAX_ENABLE_X64", "KILN_ENABLE_X64")}
    out = subprocess.run([sys.executable, "-c", code], env={**clean, **env},
                         capture_output=True, text=True, check=True)
    assert out.stdout.strip() == str(expected)


def test_bad_environment_value_is_reported():
    with pytest.raises(ValueError, match="JAX_ENABLE_X64"):
        config_module._parse_bool_env("JAX_ENABLE_X64", "maybe")


# --- errors ----------------------------------------------------------------

class FakeTracer:
    shape = (3, 4)
    dtype = np.dtype(np.float32)
    weak_type = False


def test_error_hierarchy_matches_jax():
    assert issubclass(errors.ConcretizationTypeError, TypeError)
    assert issubclass(errors.TracerBoolConversionError, errors.ConcretizationTypeError)
    assert issubclass(errors.TracerIntegerConversionError, TypeError)
    assert issubclass(errors.TracerArrayConversionError, TypeError)
    assert issubclass(errors.UnexpectedTracerError, Exception)
    assert not issubclass(errors.UnexpectedTracerError, TypeError)
    assert issubclass(errors.NonConcreteBooleanIndexError, IndexError)
    for cls in (errors.ConcretizationTypeError, errors.TracerBoolConversionError,
                errors.TracerIntegerConversionError, errors.TracerArrayConversionError,
                errors.UnexpectedTracerError, errors.NonConcreteBooleanIndexError):
        assert str(cls("custom message")) == "custom message"


@pytest.mark.parametrize("cls,fixes", [
    (errors.ConcretizationTypeError, ["static_argnums", "static_argnames"]),
    (errors.TracerBoolConversionError, ["lax.cond", "lax.while_loop", "where", "static_argnums"]),
    (errors.TracerIntegerConversionError, ["static_argnums", "fori_loop"]),
    (errors.TracerArrayConversionError, ["kiln.numpy"]),
    (errors.UnexpectedTracerError, ["Return"]),
    (errors.NonConcreteBooleanIndexError, ["where"]),
])
def test_for_tracer_messages_name_value_and_fix(cls, fixes):
    err = cls.for_tracer(FakeTracer(), context="while computing the `n` argument of foo")
    assert isinstance(err, cls)
    message = str(err)
    assert "float32[3,4]" in message
    assert "`n` argument of foo" in message
    for fix in fixes:
        assert fix in message, (fix, message)
    with pytest.raises(cls):
        raise err


def test_for_tracer_handles_objects_without_aval():
    message = str(errors.ConcretizationTypeError.for_tracer(object()))
    assert "object" in message


def test_bool_conversion_error_is_caught_as_concretization_error():
    with pytest.raises(errors.ConcretizationTypeError):
        raise errors.TracerBoolConversionError.for_tracer(FakeTracer())
    with pytest.raises(TypeError):
        raise errors.TracerBoolConversionError.for_tracer(FakeTracer())


def test_every_jax_option_name_is_accepted():
    """Issue 33: libraries set JAX's options at import (equinox: jax_numpy_dtype_promotion,
    jax_numpy_rank_promotion); every option JAX 0.10.2 has is accepted and recorded, enumerated
    ones checked as JAX checks them, and jax.config's other entry points exist."""
    names = ["jax_numpy_rank_promotion", "jax_numpy_dtype_promotion", "jax_num_cpu_devices",
             "jax_default_prng_impl", "jax_traceback_filtering", "jax_compilation_cache_dir",
             "jax_persistent_cache_min_compile_time_secs", "jax_platforms", "jax_threefry_partitionable",
             "jax_log_compiles", "jax_enable_checks", "jax_check_tracer_leaks", "jax_transfer_guard"]
    try:
        import jax as real
        names = sorted(real.config._value_holders)
    except ImportError:
        pass
    assert len(config.values) >= len(names)
    for name in names:
        assert name in config.values, name
    old = config.jax_numpy_rank_promotion
    try:
        config.update("jax_numpy_rank_promotion", "raise")
        assert config.read("jax_numpy_rank_promotion") == "raise"
        with pytest.raises(ValueError, match="allow"):
            config.update("jax_numpy_rank_promotion", "sometimes")
        config.update("jax_persistent_cache_min_compile_time_secs", 0.5)
        assert config.jax_persistent_cache_min_compile_time_secs == 0.5
        with pytest.raises(TypeError):
            config.update("jax_log_compiles", "no")  # a bool option stays a bool
    finally:
        config.update("jax_numpy_rank_promotion", old)
        config.update("jax_persistent_cache_min_compile_time_secs", 1.0)
    config.parse_flags_with_absl()
