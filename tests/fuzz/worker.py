"""The worker process: imports JAX and kiln, serves requests (generate-and-check a program, check
one program under one transformation, JAX's values of a program's variables) over length-prefixed
pickles on its stdin/stdout. A crash here (segfault, abort, hang) is seen by the parent
(pool.py), which records it and starts a new worker."""
import os
import pickle
import struct
import sys
import traceback


def _send(stream, obj):
    body = pickle.dumps(obj, protocol=pickle.HIGHEST_PROTOCOL)
    data = memoryview(struct.pack("<Q", len(body)) + body)
    while len(data):
        n = stream.write(data)
        data = data[n if n is not None else 0:]
    stream.flush()


def _read_exactly(stream, n):
    """n bytes (fewer only at EOF); loops because an unbuffered pipe returns what is there."""
    chunks, got = [], 0
    while got < n:
        chunk = stream.read(n - got)
        if not chunk:
            break
        chunks.append(chunk)
        got += len(chunk)
    return b"".join(chunks)


def _recv(stream):
    head = _read_exactly(stream, 8)
    if len(head) < 8:
        return None
    (n,) = struct.unpack("<Q", head)
    return pickle.loads(_read_exactly(stream, n))


def main():
    # the protocol owns the real stdout; anything the libraries print goes to stderr
    proto = os.fdopen(os.dup(1), "wb")
    os.dup2(2, 1)
    sys.stdout = sys.stderr
    requests = sys.stdin.buffer

    import warnings
    warnings.simplefilter("ignore")   # x64 truncation, casts of inf: both libraries alike

    import jax  # noqa: F401 -- both libraries load before the first request
    import kiln  # noqa: F401

    from . import compare
    from .gen import Reject, generate
    from .ops import ROWS

    _send(proto, ("ready",))
    while True:
        req = _recv(requests)
        if req is None:
            return
        try:
            _serve(proto, req, compare, generate, Reject, ROWS)
        except Exception:  # noqa: BLE001 -- a fuzzer bug is reported, never taken for a crash
            _send(proto, ("error", traceback.format_exc()[-2000:]))


def _serve(proto, req, compare, generate, Reject, ROWS):
    kind = req[0]
    if kind in ("campaign", "generate"):
        _, seed, x64, opts = req
        compare.set_x64(x64)
        try:
            prog = generate(seed, x64, compare.library("jax")["jax"], ROWS, **opts)
        except Reject:
            prog = None
        if kind == "generate":
            _send(proto, ("done", prog))
            return
        if prog is None:
            _send(proto, ("done", None, []))
            return
        results = []
        for t in prog.transforms:
            _send(proto, ("progress", t))
            results.append((t,) + compare.check(prog, t))
        _send(proto, ("done", prog, results))
    elif kind == "check":
        _, prog, transform = req
        _send(proto, ("progress", transform))
        _send(proto, ("done", compare.check(prog, transform)))
    elif kind == "values":
        _send(proto, ("done", compare.jax_values(req[1])))
    else:
        _send(proto, ("error", f"unknown request {kind!r}"))

if __name__ == "__main__":
    main()
