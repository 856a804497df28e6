"""kiln.monitoring: jax.monitoring's event hooks. Listeners registered here receive the events
the program records (record_event and friends); kiln records its own compile times as
'/jax/core/compile/backend_compile_duration' (seconds), the event JAX uses for them."""
import time

_listeners = {"event": [], "duration": [], "time_span": [], "scalar": []}


def record_event(event, **kwargs):
    for fn in list(_listeners["event"]):
        fn(event, **kwargs)


def record_event_duration_secs(event, duration, **kwargs):
    for fn in list(_listeners["duration"]):
        fn(event, duration, **kwargs)


def record_event_time_span(event, start_time, end_time, **kwargs):
    for fn in list(_listeners["time_span"]):
        fn(event, start_time, end_time, **kwargs)


def record_scalar(event, value, **kwargs):
    for fn in list(_listeners["scalar"]):
        fn(event, value, **kwargs)


def register_event_listener(callback):
    _listeners["event"].append(callback)


def register_event_duration_secs_listener(callback):
    _listeners["duration"].append(callback)


def register_event_time_span_listener(callback):
    _listeners["time_span"].append(callback)


def register_scalar_listener(callback):
    _listeners["scalar"].append(callback)


def _unregister(kind, callback, what):
    try:
        _listeners[kind].remove(callback)
    except ValueError:
        raise AssertionError(f"{what}: the callback was not registered") from None


def unregister_event_listener(callback):
    _unregister("event", callback, "unregister_event_listener")


def unregister_event_duration_listener(callback):
    _unregister("duration", callback, "unregister_event_duration_listener")


def unregister_event_time_span_listener(callback):
    _unregister("time_span", callback, "unregister_event_time_span_listener")


def unregister_scalar_listener(callback):
    _unregister("scalar", callback, "unregister_scalar_listener")


def clear_event_listeners():
    for v in _listeners.values():
        v.clear()


def _compiled(seconds):
    """kiln's compile of a program took `seconds` (called by jit)."""
    if _listeners["duration"]:
        record_event_duration_secs("/jax/core/compile/backend_compile_duration", seconds)
    if _listeners["time_span"]:
        end = time.time()
        record_event_time_span("/jax/core/compile/backend_compile_duration", end - seconds, end)


__all__ = ["record_event", "record_event_duration_secs", "record_event_time_span", "record_scalar",
           "register_event_listener", "register_event_duration_secs_listener", "register_event_time_span_listener",
           "register_scalar_listener", "unregister_event_listener", "unregister_event_duration_listener",
           "unregister_event_time_span_listener", "unregister_scalar_listener", "clear_event_listeners"]
