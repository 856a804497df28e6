"""A fuzzing campaign: programs by seed across worker processes, each disagreement isolated to its
signature (op, transformation, dtype, class), deduplicated, the first of each signature shrunk,
saved as a regression file and written into a markdown report. Imports neither JAX nor kiln."""
import collections
import glob
import json
import os
import queue
import re
import subprocess
import threading
import time
from dataclasses import dataclass, field

import ml_dtypes
import numpy as np

from . import known as known_mod
from .compare import CLASSES
from .pool import Crash, FuzzerError, Worker
from .program import Program, Stmt, compact_repro, literal, repro
from .shrink import isolate, outcome, shrink_inputs, signature

HERE = os.path.dirname(os.path.abspath(__file__))
REGRESSIONS = os.path.join(HERE, "regressions")


def x64_for(seed):
    """A third of the programs run with jax_enable_x64 on."""
    return seed % 3 == 0


@dataclass
class Defect:
    sig: tuple
    prog: Program           # the shrunk program
    transform: str
    cls: str
    detail: str
    jax: str                # JAX's result (summary)
    kiln: str               # kiln's result (summary)
    kexc: str = None
    count: int = 0
    seeds: list = field(default_factory=list)
    isolated: bool = True   # False: no window smaller than the whole program reproduced

    @property
    def op(self):
        return self.sig[0]


class Campaign:
    def __init__(self, workers=1, nice=0, shrink=True, log=None, gen_opts=None, check_timeout=180,
                 checkpoint=None):
        self.n_workers = workers
        self.nice = nice
        self.shrink = shrink
        self.log = log or (lambda *a: None)
        self.gen_opts = gen_opts or {}
        self.check_timeout = check_timeout
        self.checkpoint = checkpoint                # report path rewritten every 100 programs
        self.lock = threading.Lock()
        self.defects = {}                          # signature -> Defect
        self.counts = collections.Counter()        # class -> failing (program, transformation) pairs
        self.hints = collections.defaultdict(set)  # (transformation, class) -> culprit ops
        self.shrunk = set()                        # (op, class) pairs already shrunk
        self.programs = 0
        self.checks = 0
        self.rejected = 0
        self.fuzzer_errors = 0
        self.started = None
        self.kiln_version = "unknown commit"
        self.elapsed = 0.0

    # --- driving ----------------------------------------------------------------------------------
    def run(self, seeds, time_limit=None):
        self.started = time.monotonic()
        self.kiln_version = _kiln_version()     # workers import kiln once, at their start
        q = queue.Queue()
        for s in seeds:
            q.put(s)
        deadline = None if time_limit is None else self.started + time_limit
        threads = [threading.Thread(target=self._loop, args=(q, deadline), daemon=True)
                   for _ in range(self.n_workers)]
        for t in threads:
            t.start()
        for t in threads:
            t.join()
        self.elapsed = time.monotonic() - self.started
        return self

    def _loop(self, q, deadline):
        worker = Worker(nice=self.nice)
        try:
            while True:
                if deadline is not None and time.monotonic() > deadline:
                    return
                try:
                    seed = q.get_nowait()
                except queue.Empty:
                    return
                try:
                    self._program(worker, seed)
                except Exception as e:  # noqa: BLE001 -- a long campaign outlives one bad program
                    with self.lock:
                        self.fuzzer_errors += 1
                    self.log(f"fuzzer error (seed {seed}): {type(e).__name__}: {str(e)[-300:]}")
                    time.sleep(1)
        finally:
            worker.close()

    def _program(self, worker, seed):
        x64 = x64_for(seed)
        try:
            msg = worker.request(("campaign", seed, x64, self.gen_opts), timeout=self.check_timeout * 3)
        except Crash as c:
            self._crashed(worker, seed, x64, c)
            return
        except FuzzerError as e:
            with self.lock:
                self.fuzzer_errors += 1
            self.log(f"fuzzer error (seed {seed}): {str(e)[-300:]}")
            return
        _, prog, results = msg
        with self.lock:
            if prog is None:
                self.rejected += 1
                return
            self.programs += 1
            self.checks += len(results)
            n = self.programs
        failing = [r for r in results if r[1] != "ok"]
        if failing:
            try:
                values = worker.request(("values", prog))[1]
                for r in failing:
                    self._failure(worker, prog, values, r[0], r[1:])
            except (Crash, FuzzerError) as e:
                self.log(f"isolation of seed {seed} failed: {str(e)[-300:]}")
        if n % 50 == 0:
            self.log(self.progress_line())
        if self.checkpoint and n % 100 == 0:
            with self.lock:
                self.elapsed = time.monotonic() - self.started
                text = self.report()
            with open(self.checkpoint, "w") as f:
                f.write(text)

    def _crashed(self, worker, seed, x64, crash):
        transform = crash.progress or "eager"
        try:
            prog = worker.request(("generate", seed, x64, self.gen_opts))[1]
        except (Crash, FuzzerError):
            prog = None
        with self.lock:
            self.programs += 1
        if prog is None:
            with self.lock:
                self.counts["crash"] += 1
            return
        try:
            values = worker.request(("values", prog))[1]
            self._failure(worker, prog, values, transform, ("crash", crash.detail, "", "", None, None))
        except (Crash, FuzzerError) as e:
            self.log(f"isolation of crash seed {seed} failed: {str(e)[-300:]}")

    def _failure(self, worker, prog, values, transform, res):
        cls, kexc = res[0], res[4]
        with self.lock:
            self.counts[cls] += 1
            hints = set(self.hints[(transform, cls)])
        sub, sres = isolate(worker, prog, values, transform, res, hints=hints)
        isolated = sres is not None
        sres = sres or res
        sig = signature(sub, transform, cls)
        with self.lock:
            if isolated and len(sub.stmts) == 1:
                self.hints[(transform, cls)].add(sub.stmts[0].op)
            d = self.defects.get(sig)
            new = d is None
            if new:
                d = Defect(sig, sub, transform, cls, sres[1], sres[2], sres[3], sres[4], isolated=isolated)
                self.defects[sig] = d
            d.count += 1
            if len(d.seeds) < 8:
                d.seeds.append(prog.seed)
        with self.lock:
            # input shapes shrink for the first signature of each (op, class); its variants
            # (other dtypes, other transformations) keep the isolated window's inputs
            first = new and (sig[0], cls) not in self.shrunk
            self.shrunk.add((sig[0], cls))
        if first and self.shrink:
            small, r = shrink_inputs(worker, sub, transform, res)
            with self.lock:
                d.prog = small
                if r is not None:
                    d.detail, d.jax, d.kiln = r[1], r[2], r[3]
        if new:
            self.log(f"new {'/'.join(sig)} (seed {prog.seed})")

    # --- results ----------------------------------------------------------------------------------
    def progress_line(self):
        t = time.monotonic() - self.started
        counts = ", ".join(f"{c}={self.counts[c]}" for c in CLASSES if self.counts[c])
        return (f"[{t:6.0f}s] {self.programs} programs, {self.checks} checks, "
                f"{len(self.defects)} signatures; {counts or 'no disagreements'}")

    def unknown(self):
        """Signatures not in known.py (what the CI test fails on)."""
        return [s for s in self.defects if known_mod.match(s) is None]

    def stale(self):
        """known.py entries that matched nothing in this campaign."""
        return [k for k in known_mod.KNOWN if not any(known_mod.matches(k, s) for s in self.defects)]

    def report(self, title="kiln vs JAX differential fuzzing"):
        lines = [f"# {title}", "",
                 f"{self.programs} programs ({self.rejected} generations rejected, {self.fuzzer_errors} "
                 f"fuzzer errors), {self.checks} checks "
                 f"(program x transformation), {self.elapsed:.0f} s, {self.n_workers} worker(s); "
                 f"kiln at {self.kiln_version} (at the start).", "",
                 "| class | failing checks | distinct signatures |", "|---|---|---|"]
        by_cls = collections.Counter(d.cls for d in self.defects.values())
        for c in CLASSES:
            lines.append(f"| {c} | {self.counts[c]} | {by_cls[c]} |")
        lines += ["", "## Signatures", "",
                  "| class | op | transformation | dtype | count | known |", "|---|---|---|---|---|---|"]
        ordered = sorted(self.defects.values(), key=lambda d: (CLASSES.index(d.cls), d.op, -d.count))
        for d in ordered:
            k = known_mod.match(d.sig)
            lines.append(f"| {d.cls} | `{d.op}` | {d.transform} | {d.sig[2]} | {d.count} | "
                         f"{k.status if k else '**new**'} |")
        lines += ["", "## Repros", ""]
        for d in ordered:
            lines += [f"### {d.cls}: `{d.op}` under {d.transform}, {d.sig[2]} ({d.count}x, seeds {d.seeds[:4]})", ""]
            if d.detail:
                lines += [d.detail[:400], ""]
            lines += ["```python", short_repro(d), "```", "",
                      f"- JAX: `{_one_line(d.jax)}`", f"- kiln: `{_one_line(d.kiln)}`", ""]
        return "\n".join(lines) + "\n"

    def save_regressions(self, directory=REGRESSIONS):
        """One file per (class, op): its signature with the smallest program (the other
        dtypes and transformations of a defect are in the report; the files stay few and small)."""
        os.makedirs(directory, exist_ok=True)
        best = {}
        for d in self.defects.values():
            size = sum(v.size for v in d.prog.inputs.values()) + 10 * len(d.prog.stmts)
            key = (d.cls, d.op)
            if key not in best or size < best[key][0]:
                best[key] = (size, d)
        written = []
        for _, d in best.values():
            path = os.path.join(directory, regression_name(d.sig) + ".json")
            with open(path, "w") as f:
                json.dump(to_json(d), f, indent=1)
                f.write("\n")
            written.append(path)
        return written


def _kiln_version():
    try:
        head = subprocess.run(["git", "rev-parse", "--short", "HEAD"], cwd=HERE, capture_output=True,
                              text=True, timeout=10).stdout.strip()
        dirty = subprocess.run(["git", "status", "--porcelain", "--untracked-files=no"], cwd=HERE,
                               capture_output=True, text=True, timeout=10).stdout.strip()
        return head + (" with uncommitted changes" if dirty else "")
    except (OSError, subprocess.SubprocessError):
        return "unknown commit"


def _one_line(s):
    s = re.sub(r"\s+", " ", s or "")
    return s[:240] + ("..." if len(s) > 240 else "")


def short_repro(d):
    """A few lines: inputs as literals and the transformed call (full script: regressions/)."""
    return compact_repro(d.prog, d.transform)


def regression_name(sig):
    raw = "__".join([sig[3], sig[0], sig[1], sig[2]])
    return re.sub(r"[^A-Za-z0-9_.,+-]+", "_", raw)[:150]


def to_json(d):
    p = d.prog
    return {
        "signature": list(d.sig),
        "class": d.cls, "transform": d.transform, "x64": p.x64, "seed": p.seed, "count": d.count,
        "isolated": d.isolated,
        "inputs": {n: literal(v) for n, v in p.inputs.items()},
        "stmts": [[s.out, s.op, s.expr, s.args, s.kind, s.dtype] for s in p.stmts],
        "out": p.out, "in_axes": p.in_axes, "batch": p.batch, "grad_args": p.grad_args,
        "out_shape": list(p.out_shape), "out_dtype": p.out_dtype,
        "detail": d.detail, "jax": d.jax[:600], "kiln": d.kiln[:600], "kiln_exc": d.kexc,
        "repro": repro(p, d.transform),
    }


def from_json(obj):
    ns = {"np": np, "ml_dtypes": ml_dtypes, "nan": np.nan, "inf": np.inf, "complex": complex}
    inputs = {n: eval(src, ns) for n, src in obj["inputs"].items()}  # noqa: S307 -- our own files
    prog = Program(obj["seed"], obj["x64"], inputs, [Stmt(*s) for s in obj["stmts"]], obj["out"])
    prog.in_axes, prog.batch, prog.grad_args = obj["in_axes"], obj["batch"], obj["grad_args"]
    prog.out_shape, prog.out_dtype = tuple(obj["out_shape"]), obj["out_dtype"]
    return prog


def replay(paths=None, worker=None):
    """Re-checks saved regressions: [(path, signature, outcome class)] ('ok' once fixed)."""
    paths = paths if paths is not None else sorted(glob.glob(os.path.join(REGRESSIONS, "*.json")))
    own = worker is None
    worker = worker or Worker()
    out = []
    try:
        for path in paths:
            with open(path) as f:
                obj = json.load(f)
            prog = from_json(obj)
            res = outcome(worker, prog, obj["transform"])
            out.append((path, tuple(obj["signature"]), res[0], res))
    finally:
        if own:
            worker.close()
    return out


__all__ = ["Campaign", "Defect", "replay", "x64_for", "Crash"]
