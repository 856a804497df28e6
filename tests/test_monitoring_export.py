"""jax.monitoring's listeners (kiln records its compile times), and jax.export / jax.ffi, which
name themselves as not supported (kiln has no XLA)."""
import numpy as np
import pytest

import kiln
import kiln.numpy as jnp


def test_listeners_receive_events_and_compile_durations():
    events, durations, spans = [], [], []
    kiln.monitoring.register_event_listener(lambda e, **kw: events.append((e, kw)))
    kiln.monitoring.register_event_duration_secs_listener(lambda e, d, **kw: durations.append((e, d)))
    kiln.monitoring.register_event_time_span_listener(lambda e, a, b, **kw: spans.append((e, b - a)))
    try:
        kiln.monitoring.record_event("/my/event", step=3)
        assert events == [("/my/event", {"step": 3})]
        f = kiln.jit(lambda x: jnp.sin(x) * 3 + 1)
        x = jnp.asarray(np.arange(5.0, dtype=np.float32))
        f(x)
        f(x)  # cached: no second compile
        compiles = [d for e, d in durations if e == "/jax/core/compile/backend_compile_duration"]
        assert len(compiles) == 1 and 0 < compiles[0] < 60
        assert len(spans) == 1 and abs(spans[0][1] - compiles[0]) < 1e-3
    finally:
        kiln.monitoring.clear_event_listeners()
    with pytest.raises(AssertionError, match="not registered"):
        kiln.monitoring.unregister_event_listener(print)


def test_export_and_ffi_name_themselves():
    with pytest.raises(NotImplementedError, match="jax.export.export is not supported by kiln.*StableHLO"):
        kiln.export.export(kiln.jit(lambda x: x))
    with pytest.raises(NotImplementedError, match="jax.ffi.ffi_call.*pure_callback"):
        kiln.ffi.ffi_call("target", None)
    assert kiln.export.is_symbolic_dim(3) is False
    assert kiln.export.default_export_platform() in ("cpu", "cuda")
    with kiln.auto_pcast(True):
        pass
