"""kiln's options (`kiln.config`), in JAX's spelling.

Pure Python; imports nothing from kiln. As in JAX, an option has a process-wide value
(`config.update`) and, within a context manager (`jax.enable_x64()`, `jax.debug_nans()`, ...), a
value of the calling thread alone (`config._override`), which the thread reads instead. Each
distinct set of effective values is a configuration *state* with a small integer id
(`config.state_id()`): compile caches key on it, so a thread in `enable_x64()` and one outside
it keep apart, and a context that restores the values brings back the same state's entries.
Modules whose caches depend on an option register `config._on_change(callback)`: called with
(name, value, thread_only) after the process-wide value or this thread's override changes.
"""

import contextlib
import os
import threading

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



# Every other option JAX 0.10.2 has, with its default: config.update accepts and records each (a
# real JAX name never raises); the ones in _CHOICES are checked as JAX checks them. Which of them
# kiln honours is said where it reads them (kiln reads config.<name>); the others have no meaning
# for kiln (XLA's and PJRT's flags, jax2tf, Pallas's Mosaic) and are only recorded.
_JAX_OPTIONS = {
    'check_vma': False, 'eager_constant_folding': False, 'jax2tf_associative_scan_reductions': False,
    'jax2tf_default_native_serialization': True, 'jax_allow_f16_reductions': True,
    'jax_array_garbage_collection_guard': None, 'jax_auto_pcast': True, 'jax_backend_target': '',
    'jax_bcoo_cusparse_lowering': False, 'jax_captured_constants_report_frames': 0,
    'jax_captured_constants_warn_bytes': 2000000000, 'jax_check_proxy_envs': True,
    'jax_check_static_indices': False, 'jax_check_tracer_leaks': False,
    'jax_compilation_cache_check_contents': False, 'jax_compilation_cache_dir': None,
    'jax_compilation_cache_expect_pgle': False, 'jax_compilation_cache_include_metadata_in_key': False,
    'jax_compilation_cache_max_size': -1, 'jax_compiler_detailed_logging_min_ops': 10,
    'jax_compiler_enable_remat_pass': True, 'jax_cpu_collectives_implementation': 'gloo',
    'jax_cpu_enable_async_dispatch': True, 'jax_cpu_get_global_topology_timeout_minutes': 5,
    'jax_cpu_get_local_topology_timeout_minutes': 2, 'jax_cross_host_transfer_socket_address': '',
    'jax_cross_host_transfer_timeout_seconds': None, 'jax_cross_host_transfer_transfer_size': None,
    'jax_cross_host_transport_addresses': '', 'jax_cuda_visible_devices': 'all', 'jax_custom_vjp3': False,
    'jax_debug_key_reuse': False, 'jax_debug_leaked_clients_on_clear_backends': False,
    'jax_debug_log_modules': '', 'jax_default_device': None, 'jax_default_prng_impl': 'threefry2x32',
    'jax_disable_bwd_checks': False, 'jax_disable_most_optimizations': False,
    'jax_disable_vmap_shmap_error': False, 'jax_disallow_mesh_context_manager': False,
    'jax_distributed_debug': False, 'jax_dump_ir_modes': 'stablehlo', 'jax_dump_ir_to': '',
    'jax_embedded_constants_max_bytes': 32, 'jax_enable_checks': False, 'jax_enable_compilation_cache': True,
    'jax_enable_custom_prng': False, 'jax_enable_pgle': False, 'jax_enable_preemption_service': True,
    'jax_enable_recoverability': False, 'jax_error_checking_behavior_divide': 'ignore',
    'jax_error_checking_behavior_nan': 'ignore', 'jax_error_checking_behavior_oob': 'ignore',
    'jax_exec_time_optimization_effort': 0.0, 'jax_experimental_unsafe_xla_runtime_errors': False,
    'jax_explain_cache_misses': False, 'jax_explicit_x64_dtypes': 1,
    'jax_export_calling_convention_version': 10, 'jax_export_ignore_forward_compatibility': False,
    'jax_force_dcn_cross_host_transfers': False, 'jax_high_dynamic_range_gumbel': False,
    'jax_hlo_source_file_canonicalization_regex': None, 'jax_include_debug_info_in_dumps': True,
    'jax_include_full_tracebacks_in_locations': True, 'jax_legacy_prng_key': 'allow',
    'jax_log_checkpoint_residuals': False, 'jax_log_compiles': False, 'jax_logging_level': 'NOTSET',
    'jax_memory_fitting_effort': 0.0, 'jax_memory_fitting_level': 'O2', 'jax_mock_gpu_topology': '',
    'jax_mosaic_allow_hlo': False, 'jax_mutable_array_checks': True, 'jax_no_execution': False,
    'jax_no_tracing': False, 'jax_num_cpu_devices': -1, 'jax_numpy_dtype_promotion': 'standard',
    'jax_numpy_rank_promotion': 'allow', 'jax_oneapi_visible_devices': 'all',
    'jax_optimization_level': 'UNKNOWN', 'jax_pallas_enable_debug_checks': False,
    'jax_pallas_poison_buffers': False, 'jax_pallas_use_mosaic_gpu': True,
    'jax_pallas_verbose_errors': False,
    'jax_persistent_cache_enable_xla_caches': 'xla_gpu_per_fusion_autotune_cache_dir',
    'jax_persistent_cache_min_compile_time_secs': 1.0, 'jax_persistent_cache_min_entry_size_bytes': 0,
    'jax_pgle_aggregation_percentile': 90, 'jax_pgle_profiling_runs': 3,
    'jax_pjrt_client_create_options': None, 'jax_platform_name': '', 'jax_platforms': None,
    'jax_pprint_use_color': True, 'jax_ragged_dot_use_gpu_pallas_triton_lowering': False,
    'jax_ragged_dot_use_ragged_dot_instruction': True, 'jax_raise_persistent_cache_errors': False,
    'jax_random_seed_offset': 0, 'jax_refs_to_pins': False, 'jax_remat3': False,
    'jax_remove_custom_partitioning_ptr_from_cache_key': False,
    'jax_remove_size_one_mesh_axis_from_type': False, 'jax_rocm_visible_devices': 'all', 'jax_scan3': False,
    'jax_send_traceback_to_runtime': 'off', 'jax_serialization_version': 0,
    'jax_share_binary_between_hosts': False, 'jax_share_binary_between_hosts_timeout_ms': 1200000,
    'jax_softmax_custom_jvp': False, 'jax_sort_devices_by_process_index': True,
    'jax_source_url_schema': None, 'jax_thread_guard': False, 'jax_threefry_gpu_kernel_lowering': False,
    'jax_threefry_partitionable': True, 'jax_traceback_filtering': 'auto',
    'jax_traceback_in_locations_limit': 100, 'jax_tracer_error_num_traceback_frames': 5,
    'jax_transfer_guard': None, 'jax_transfer_guard_device_to_device': None,
    'jax_transfer_guard_device_to_host': None, 'jax_transfer_guard_host_to_device': None,
    'jax_use_direct_linearize': True, 'jax_use_emit_pipeline_primitive': False, 'jax_use_magma': 'auto',
    'jax_use_shardy_partitioner': True, 'jax_use_simplified_jaxpr_constants': False, 'jax_xla_backend': '',
    'jax_xla_profile_version': 0, 'mock_num_gpu_processes': 0,

}

_CHOICES = {
    "jax_numpy_rank_promotion": ("allow", "warn", "raise"),
    "jax_numpy_dtype_promotion": ("standard", "strict"),
    "jax_default_prng_impl": ("threefry2x32", "rbg", "unsafe_rbg"),
    "jax_legacy_prng_key": ("allow", "warn", "error"),
    "jax_traceback_filtering": ("off", "tracebackhide", "remove_frames", "quiet_remove_frames", "auto"),
    "jax_send_traceback_to_runtime": ("off", "on", "full"),
    "jax_error_checking_behavior_nan": ("ignore", "raise"),
    "jax_error_checking_behavior_divide": ("ignore", "raise"),
    "jax_error_checking_behavior_oob": ("ignore", "raise"),
    **{n: (None, "allow", "log", "disallow", "log_explicit", "disallow_explicit")
       for n in ("jax_transfer_guard", "jax_transfer_guard_host_to_device", "jax_transfer_guard_device_to_host",
                 "jax_transfer_guard_device_to_device")},
}


def _recorded(default):
    """The validator of an option kiln records: JAX's choices where it has them, else the type of
    its default (a bool stays a bool; anything goes where JAX's default is None or a string)."""
    def validate(name, value):
        value = getattr(value, "value", value)  # JAX's enum members
        if name in _CHOICES:
            if value not in _CHOICES[name]:
                raise ValueError(f"config.update({name!r}, {value!r}): the value must be one of "
                                 f"{list(c for c in _CHOICES[name] if c is not None)}")
            return value
        if isinstance(default, bool):
            return _validate_bool(name, value)
        return value
    return validate


def _env_default(name, default):
    """JAX reads an option's starting value from the environment variable of its name in capitals."""
    text = os.environ.get(name.upper())
    if text is None:
        return default
    if isinstance(default, bool):
        return _parse_bool_env(name.upper(), text)
    if isinstance(default, int):
        try:
            return int(text)
        except ValueError:
            return default
    if isinstance(default, float):
        try:
            return float(text)
        except ValueError:
            return default
    return text


_local = threading.local()  # .overrides: this thread's {name: value} set by context managers
_MISSING = object()
_states = {}  # every configuration state met (its values, as text) -> its id
_states_lock = threading.Lock()
_truthy_overrides = {}  # name -> how many threads' overrides hold a true value now (any thread)


def _state_of(values):
    key = tuple(sorted((n, repr(v)) for n, v in values.items()))
    with _states_lock:
        return _states.setdefault(key, len(_states))


def _count_truthy(name, old, new):
    delta = (new is not _MISSING and bool(new)) - (old is not _MISSING and bool(old))
    if delta:
        with _states_lock:
            _truthy_overrides[name] = _truthy_overrides.get(name, 0) + delta


class Config:
    """Holds kiln's options. Read them as attributes: `config.jax_enable_x64` (this thread's value:
    its override within a context manager, else the process-wide one)."""

    def __init__(self):
        # name -> validator(name, value) -> normalized value
        object.__setattr__(self, "_validators", {})
        object.__setattr__(self, "_global", {})  # name -> process-wide value
        object.__setattr__(self, "_callbacks", [])
        object.__setattr__(self, "_global_state", [0, 0])  # [its state id, its epoch (bumped per change)]
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
        for name, default in _JAX_OPTIONS.items():
            self._define(name, _env_default(name, default), _recorded(default))
        self._global_state[0] = _state_of(self._global)  # the state at start-up: id 0

    def _define(self, name, default, validator):
        """Declare an option (for kiln's own modules, not users)."""
        self._validators[name] = validator
        self._global[name] = validator(name, default)
        if name not in Config.__dict__:
            setattr(Config, name, property(lambda self, n=name: self._get(n)))

    def _get(self, name):
        overrides = getattr(_local, "overrides", None)
        if overrides:
            value = overrides.get(name, _MISSING)
            if value is not _MISSING:
                return value
        return self._global[name]

    def _check_name(self, name, what):
        if name not in self._validators:
            raise AttributeError(f"Unrecognized config option: {name} (config.{what}; kiln knows every "
                                 f"option of JAX 0.10.2 and its own kiln_*: see config.values)")

    def update(self, name, value):
        """Set option `name` to `value` for the whole process (as `jax.config.update`); a thread
        inside a context manager of the option keeps reading the context's value."""
        self._check_name(name, "update")
        value = self._validators[name](name, value)
        old = self._global[name]
        self._global[name] = value
        if old != value:
            self._global_state[:] = [_state_of(self._global), self._global_state[1] + 1]
            self._notify(name, value, False)

    def _notify(self, name, value, thread_only):
        for callback in list(self._callbacks):
            callback(name, value, thread_only)

    def _override(self, name, value):
        """This thread reads `value` for option `name` until `_restore(name, token)` with the token
        returned (the context managers' half of an option, thread-local as in JAX)."""
        self._check_name(name, "override")
        value = self._validators[name](name, value)
        overrides = getattr(_local, "overrides", None)
        if overrides is None:
            overrides = _local.overrides = {}
        old_value = getattr(self, name)
        token = overrides.get(name, _MISSING)
        overrides[name] = value
        _count_truthy(name, token, value)
        _local.state = None
        if old_value != value:
            self._notify(name, value, True)
        return token

    def _restore(self, name, token):
        overrides = _local.overrides
        old_value = getattr(self, name)
        _count_truthy(name, overrides.get(name, _MISSING), token)
        if token is _MISSING:
            overrides.pop(name, None)
        else:
            overrides[name] = token
        _local.state = None
        value = getattr(self, name)
        if old_value != value:
            self._notify(name, value, True)

    @contextlib.contextmanager
    def _context(self, name, value):
        token = self._override(name, value)
        try:
            yield
        finally:
            self._restore(name, token)

    def overridden_true(self, name):
        """Whether some thread's context manager holds option `name` at a true value now."""
        return _truthy_overrides.get(name, 0) > 0

    def in_context(self):
        """Whether this thread is inside a context manager of some option (its state is its own)."""
        return bool(getattr(_local, "overrides", None))

    def state_id(self):
        """The id of this thread's configuration state (its effective values): part of every compile
        cache key."""
        if not self.in_context():
            return self._global_state[0]
        cached = getattr(_local, "state", None)
        if cached is not None and cached[0] == self._global_state[1]:
            return cached[1]
        epoch = self._global_state[1]
        sid = _state_of(self.values)
        _local.state = (epoch, sid)
        return sid

    def read(self, name):
        """Current value of option `name`."""
        self._check_name(name, "read")
        return getattr(self, name)

    @property
    def values(self):
        """Every option's current value (this thread's), by name."""
        return {n: getattr(self, n) for n in self._validators}

    def _read(self, name):
        return self.read(name)

    def parse_flags_with_absl(self):
        """Accepted: kiln takes no absl flags (options come from config.update and JAX_* variables)."""

    def config_with_absl(self):
        """Accepted: as parse_flags_with_absl."""

    def _on_change(self, callback):
        """Register `callback(name, new_value, thread_only)`, called after an option changes value
        (not on no-op updates): for the whole process (`update`), or for this thread alone (a context
        manager entered or left). Returns `callback`, so it can decorate."""
        self._callbacks.append(callback)
        return callback

    def __setattr__(self, name, value):
        # `config.jax_enable_x64 = True` would bypass validation and callbacks.
        if name in self._validators:
            self.update(name, value)
        else:
            raise AttributeError(f"Unrecognized config option: {name} (set options with "
                                 f"config.update(name, value); see config.values)")

    @property
    def x64_enabled(self):
        return self.jax_enable_x64

    def __repr__(self):
        items = ", ".join(f"{n}={getattr(self, n)!r}" for n in sorted(self._validators))
        return f"kiln.config({items})"


config = Config()


@contextlib.contextmanager
def enable_x64(new_value=True):
    """Within the block, this thread has jax_enable_x64 = new_value (as `jax.experimental.enable_x64`)."""
    with config._context("jax_enable_x64", new_value):
        yield


@contextlib.contextmanager
def disable_x64():
    """Temporarily turn jax_enable_x64 off."""
    with enable_x64(False):
        yield
