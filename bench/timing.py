"""The timing loop bench/'s standalone scripts share: the median of synchronized calls."""
import statistics
import time


def timed(fn, sync, reps, warm=2):
    """Median seconds of sync(fn()) over reps calls, after `warm` untimed ones."""
    for _ in range(warm):
        sync(fn())
    ts = []
    for _ in range(reps):
        t = time.perf_counter()
        sync(fn())
        ts.append(time.perf_counter() - t)
    return statistics.median(ts)
