"""Parent side of the worker protocol: a worker subprocess that may die. A request that kills it
(segfault, abort) or outlives its timeout comes back as a crash with the worker's last words, and
the next request starts a fresh worker. Imports neither JAX nor kiln."""
import os
import select
import subprocess
import sys
import tempfile
import time

from .worker import _recv, _send

ROOT = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))

# one thread per library: the campaign runs beside other work on a small machine
WORKER_ENV = {
    "KILN_NUM_THREADS": "1",
    "KILN_COMPILE_THREADS": "1",
    "XLA_FLAGS": "--xla_cpu_multi_thread_eigen=false intra_op_parallelism_threads=1",
    "JAX_PLATFORMS": "cpu",
    "KILN_PLATFORM": "cpu",
    "TF_CPP_MIN_LOG_LEVEL": "3",
    "OMP_NUM_THREADS": "1",
    "OPENBLAS_NUM_THREADS": "1",
}


class FuzzerError(Exception):
    """The worker reported an exception of the fuzzer's own code (not a kiln or JAX result)."""


class Crash(Exception):
    def __init__(self, progress, detail):
        super().__init__(detail)
        self.progress = progress      # the transformation running when the worker died
        self.detail = detail


class Worker:
    def __init__(self, nice=0):
        self.nice = nice
        self.proc = None
        self.log = None
        self.starts = 0

    def _start(self):
        env = dict(os.environ)
        env.update(WORKER_ENV)
        env["PYTHONPATH"] = os.pathsep.join([os.path.join(ROOT, "python"), ROOT, env.get("PYTHONPATH", "")])
        self.log = tempfile.TemporaryFile()
        cmd = [sys.executable, "-m", "tests.fuzz.worker"]
        if self.nice:
            cmd = ["nice", "-n", str(self.nice)] + cmd
        # unbuffered: select() on the pipe must see every byte not yet read (a buffered reader
        # could hold the next message while select waits for more)
        self.proc = subprocess.Popen(cmd, cwd=ROOT, env=env, stdin=subprocess.PIPE, stdout=subprocess.PIPE,
                                     stderr=self.log, bufsize=0)
        self.starts += 1
        msg = self._read(timeout=300)
        if msg != ("ready",):
            raise RuntimeError(f"fuzz worker failed to start: {self._tail()}")

    def _tail(self, n=1500):
        if self.log is None:
            return ""
        self.log.seek(0, os.SEEK_END)
        size = self.log.tell()
        self.log.seek(max(0, size - n))
        return self.log.read().decode(errors="replace")

    def _read(self, timeout):
        ready, _, _ = select.select([self.proc.stdout], [], [], timeout)
        if not ready:
            return "timeout"
        return _recv(self.proc.stdout)

    def close(self):
        if self.proc is not None:
            try:
                self.proc.stdin.close()
            except OSError:
                pass
            try:
                self.proc.wait(timeout=10)
            except subprocess.TimeoutExpired:
                self.proc.kill()
                self.proc.wait()
            self.proc = None

    def _kill(self):
        if self.proc is not None:
            self.proc.kill()
            self.proc.wait()
            self.proc = None

    def request(self, req, timeout=180):
        """The final ('done', ...) message of `req`; raises Crash when the worker dies or hangs."""
        if self.proc is None or self.proc.poll() is not None:
            self._start()
        try:
            _send(self.proc.stdin, req)
        except (BrokenPipeError, OSError):
            self._kill()
            raise Crash(None, "worker gone") from None
        progress = None
        deadline = time.monotonic() + timeout
        while True:
            msg = self._read(max(0.0, deadline - time.monotonic()))
            if msg == "timeout":
                self._kill()
                raise Crash(progress, f"timeout after {timeout}s")
            if msg is None:
                code = self.proc.wait()
                tail = self._tail()
                self.proc = None
                raise Crash(progress, f"worker died (exit {code}): {tail[-600:]}")
            if msg[0] == "progress":
                progress = msg[1]
                continue
            if msg[0] == "error":
                raise FuzzerError(msg[1])
            return msg
