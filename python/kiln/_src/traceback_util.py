"""jax._src.traceback_util's glue that libraries call at import (flax, equinox): api_boundary marks
a library's entry points and register_exclusion its files, so tracebacks could leave their frames
out. kiln shows tracebacks as Python makes them: both are recorded and change nothing."""
_exclude_paths = []


def register_exclusion(path):
    _exclude_paths.append(path)


def api_boundary(fun=None, *, repro_api_name=None, repro_user_func=False):
    """Returns fun as it is (usable as @api_boundary and @api_boundary(...))."""
    del repro_api_name, repro_user_func
    if fun is None:
        return lambda f: f
    return fun


def filter_traceback(tb):
    return tb


def _ignore_internal_frames(tb):  # the name some libraries probe
    return tb


def include_frame(frame):
    """Whether a frame is the user's (its file is under no registered exclusion)."""
    filename = frame.f_code.co_filename if hasattr(frame, "f_code") else getattr(frame, "filename", "")
    return not any(filename.startswith(p) for p in _exclude_paths)
