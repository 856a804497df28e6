"""kiln.profiler: jax.profiler's names. kiln writes no profiler traces yet (KILN_CPU_PROFILE=1 and
KILN_GPU_PROFILE=1 print per-step times instead): the tracing calls are accepted and do nothing,
so programs that annotate themselves run unchanged."""
import contextlib
import functools


@contextlib.contextmanager
def trace(log_dir=None, create_perfetto_link=False, create_perfetto_trace=False):
    del log_dir, create_perfetto_link, create_perfetto_trace
    yield


def start_trace(log_dir=None, create_perfetto_link=False, create_perfetto_trace=False):
    del log_dir, create_perfetto_link, create_perfetto_trace


def stop_trace():
    pass


class TraceAnnotation(contextlib.ContextDecorator):
    def __init__(self, name, **kwargs):
        self.name, self.kwargs = name, kwargs

    def __enter__(self):
        return self

    def __exit__(self, *exc):
        return False


StepTraceAnnotation = TraceAnnotation


def annotate_function(func=None, name=None, **kwargs):
    if func is None:
        return functools.partial(annotate_function, name=name, **kwargs)
    return func


def start_server(port):
    raise NotImplementedError("profiler.start_server: kiln has no profiler server yet")


def device_memory_profile(backend=None):
    raise NotImplementedError("profiler.device_memory_profile: use Device.memory_stats() (kiln has no pprof output)")


def save_device_memory_profile(filename, backend=None):
    device_memory_profile(backend)
