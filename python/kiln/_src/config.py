"""kiln's global options (`kiln.config`), in JAX's spelling.

Pure Python; imports nothing from kiln. Values are plain attributes so that
hot paths (dtype canonicalization on every dispatch) read them at attribute
speed. Modules whose caches depend on an option register a callback with
`config._on_change` so they can drop stale entries when it flips.
"""

import contextlib
import os

_TRUE_STRINGS = ("1", "true", "t", "yes", "y", "on")
_FALSE_STRINGS = ("0", "false", "f", "no", "n", "off", "")


def _parse_bool_env(var_name, text):
    lowered = text.strip().lower()
    if lowered in _TRUE_STRINGS:
        return True
    if lowered in _FALSE_STRINGS:
        return False
    raise ValueError(
        f"environment variable {var_name}={text!r} is not a truth value; "
        f"use one of {_TRUE_STRINGS} or {_FALSE_STRINGS[:-1]}")


def _validate_bool(name, value):
    # JAX accepts Python bools; 0/1 integers are accepted too since shell-style
    # code often passes them. Anything else is almost surely a mistake.
    if isinstance(value, bool):
        return value
    if isinstance(value, int) and value in (0, 1):
        return bool(value)
    raise TypeError(
        f"config.update({name!r}, {value!r}): expected a bool (True or False), "
        f"got {type(value).__name__}")


_PRECISIONS = (None, "default", "high", "highest", "bfloat16", "tensorfloat32", "float32",
               "bfloat16_3x", "fastest")


def _validate_precision(name, value):
    if value not in _PRECISIONS:
        raise ValueError(f"{name} must be one of {list(_PRECISIONS)}, got {value!r}")
    return value


def _env_bool(var_name):
    text = os.environ.get(var_name)
    return False if text is None else _parse_bool_env(var_name, text)


def _x64_default():
    for var_name in ("KILN_ENABLE_X64", "JAX_ENABLE_X64"):
        text = os.environ.get(var_name)
        if text is not None:
            return _parse_bool_env(var_name, text)
    return False


class Config:
    """Holds kiln's options. Read them as attributes: `config.jax_enable_x64`."""

    def __init__(self):
        # name -> validator(name, value) -> normalized value
        object.__setattr__(self, "_validators", {})
        object.__setattr__(self, "_callbacks", [])
        self._define("jax_enable_x64", _x64_default(), _validate_bool)
        self._define("jax_default_matmul_precision",
                     _validate_precision("JAX_DEFAULT_MATMUL_PRECISION",
                                         os.environ.get("JAX_DEFAULT_MATMUL_PRECISION", "").lower() or None),
                     _validate_precision)
        # kiln's own: every functional update (x.at[i].set(v), lax.dynamic_update_slice,
        # lax.scatter) that copies its operand instead of writing into it is printed with its
        # source line (kiln_log_copies), or raises kiln.errors.CopyError (kiln_forbid_copies)
        self._define("jax_disable_jit", _env_bool("JAX_DISABLE_JIT"), _validate_bool)  # jit runs f as it is
        # a jitted call whose results hold a NaN (inf) raises FloatingPointError naming the primitive
        self._define("jax_debug_nans", _env_bool("JAX_DEBUG_NANS"), _validate_bool)
        self._define("jax_debug_infs", _env_bool("JAX_DEBUG_INFS"), _validate_bool)
        self._define("kiln_log_copies", _env_bool("KILN_LOG_COPIES"), _validate_bool)
        self._define("kiln_forbid_copies", _env_bool("KILN_FORBID_COPIES"), _validate_bool)

    def _define(self, name, default, validator):
        """Declare an option (for kiln's own modules, not users)."""
        self._validators[name] = validator
        object.__setattr__(self, name, validator(name, default))

    def _check_name(self, name, what):
        if name not in self._validators:
            known = ", ".join(sorted(self._validators))
            raise ValueError(
                f"config.{what}: unknown option {name!r}; kiln knows: {known}")

    def update(self, name, value):
        """Set option `name` to `value` (as `jax.config.update`)."""
        self._check_name(name, "update")
        value = self._validators[name](name, value)
        old = getattr(self, name)
        object.__setattr__(self, name, value)
        if old != value:
            for callback in list(self._callbacks):
                callback(name, value)

    def read(self, name):
        """Current value of option `name`."""
        self._check_name(name, "read")
        return getattr(self, name)

    def _on_change(self, callback):
        """Register `callback(name, new_value)`, called after an option changes
        value (not on no-op updates). Returns `callback`, so it can decorate."""
        self._callbacks.append(callback)
        return callback

    def __setattr__(self, name, value):
        # `config.jax_enable_x64 = True` would bypass validation and callbacks.
        if name in self._validators:
            self.update(name, value)
        else:
            raise AttributeError(
                f"config has no option {name!r}; use config.update(name, value) "
                f"with one of: {', '.join(sorted(self._validators))}")

    @property
    def x64_enabled(self):
        return self.jax_enable_x64

    def __repr__(self):
        items = ", ".join(f"{n}={getattr(self, n)!r}" for n in sorted(self._validators))
        return f"kiln.config({items})"


config = Config()


@contextlib.contextmanager
def enable_x64(new_value=True):
    """Temporarily set jax_enable_x64 (as `jax.experimental.enable_x64`)."""
    old = config.jax_enable_x64
    config.update("jax_enable_x64", new_value)
    try:
        yield
    finally:
        config.update("jax_enable_x64", old)


@contextlib.contextmanager
def disable_x64():
    """Temporarily turn jax_enable_x64 off."""
    with enable_x64(False):
        yield
