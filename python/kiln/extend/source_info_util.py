"""jax.extend.source_info_util: where equations come from (kiln records no Python source for its
equations; these return empty records and accept what libraries set)."""
import contextlib
import traceback


class NameStack(tuple):
    def extend(self, name):
        return NameStack(self + ((name,) if isinstance(name, str) else tuple(name)))

    def __str__(self):
        return "/".join(self)


class SourceInfo:
    def __init__(self, traceback=None, name_stack=NameStack()):
        self.traceback, self.name_stack = traceback, name_stack

    def replace(self, *, traceback=None, name_stack=None):
        return SourceInfo(self.traceback if traceback is None else traceback,
                          self.name_stack if name_stack is None else name_stack)


_current = [SourceInfo()]


def new_source_info():
    return SourceInfo()


def current():
    return _current[-1]


def current_name_stack():
    return _current[-1].name_stack


def new_name_stack(name=""):
    return NameStack((name,) if name else ())


@contextlib.contextmanager
def extend_name_stack(name):
    _current.append(_current[-1].replace(name_stack=_current[-1].name_stack.extend(name)))
    try:
        yield _current[-1].name_stack
    finally:
        _current.pop()


@contextlib.contextmanager
def set_name_stack(name_stack):
    _current.append(_current[-1].replace(name_stack=name_stack))
    try:
        yield
    finally:
        _current.pop()


@contextlib.contextmanager
def reset_name_stack():
    with set_name_stack(NameStack()):
        yield


@contextlib.contextmanager
def transform_name_stack(name):
    with extend_name_stack(name) as s:
        yield s


@contextlib.contextmanager
def user_context(c, *, name_stack=None):
    del c, name_stack
    yield


_exclusions = set()


def register_exclusion(path):
    """Frames from files under path are left out of user tracebacks (recorded)."""
    _exclusions.add(path)


def summarize(source_info, num_frames=1):
    del source_info, num_frames
    frames = traceback.extract_stack()[:-1]
    return f"{frames[-1].filename}:{frames[-1].lineno}" if frames else "unknown"
