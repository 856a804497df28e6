"""Command line of the ecosystem harness: `python3 -m tests.ecosystem [LIB ...] [--eco-sample F]
[--repo LIB=DIR ...]`.

Prints the table and writes it to build/ecosystem/report.md (README.md says what each column
means). Heavy: run it under `nice`, one library after another, one test process at a time.
"""
import argparse
import datetime
import os
import signal
import subprocess
import sys

from . import harness, report
from .libraries import LIBRARIES, by_name


def _kiln_state():
    """Which kiln was measured: the commit, and whether the work tree had changes on top."""
    def git(*args):
        return subprocess.run(["git", "-C", harness.REPO, *args], capture_output=True,
                              text=True).stdout.strip()
    head = git("rev-parse", "--short", "HEAD") or "unknown"
    dirty = git("status", "--porcelain", "--untracked-files=no", "--", "python", "ir",
                "transforms", "codegen", "runtime")
    stamp = datetime.datetime.now(datetime.timezone.utc).strftime("%Y-%m-%d %H:%M UTC")
    return f"kiln {head}{' with uncommitted changes' if dirty else ''}, measured {stamp}"


def main(argv=None):
    parser = argparse.ArgumentParser(prog="python3 -m tests.ecosystem", description=__doc__)
    parser.add_argument("libraries", nargs="*",
                        help=f"libraries to measure (default all): {[l.name for l in LIBRARIES]}")
    parser.add_argument("--eco-sample", type=float, default=None,
                        help="fraction of each suite to run, chosen by crc32 of the test id "
                             "(default 0.1; with --report, the latest saved of any)")
    parser.add_argument("--root", default=os.path.join(harness.REPO, "build", "ecosystem"),
                        help="cache and output folder (git-ignored)")
    parser.add_argument("--rerun-jax", action="store_true", help="ignore cached JAX results")
    parser.add_argument("--top", type=int, default=10, help="causes listed per library")
    parser.add_argument("--report", action="store_true",
                        help="run nothing: tabulate the saved results of this sample")
    parser.add_argument("--repo", action="append", default=[], metavar="LIB=DIR",
                        help="a clone (checkout or bare mirror) of LIB's repository: its tests at "
                             "the pinned tag are measured, for "
                             f"{[l.name for l in LIBRARIES if l.repo_tests]} (repeatable)")
    args = parser.parse_args(argv)
    repos = {}
    for item in args.repo:
        name, sep, path = item.partition("=")
        if not sep or not path:
            parser.error(f"--repo wants LIB=DIR, got {item!r}")
        (lib,) = by_name([name])
        if not lib.repo_tests:
            parser.error(f"--repo: {name} takes its tests from its {lib.tests_from}")
        if not os.path.isdir(path):
            parser.error(f"--repo: {path} is not a folder")
        repos[name] = os.path.abspath(path)
    if args.eco_sample is None and not args.report:
        args.eco_sample = 0.1
    if args.eco_sample is not None and not 0 < args.eco_sample <= 1:
        parser.error("--eco-sample must be in (0, 1]")
    # SIGTERM unwinds like Ctrl-C, so the running pytest process group is killed too
    signal.signal(signal.SIGTERM, lambda signum, frame: sys.exit(128 + signum))
    results = []
    state = _kiln_state()
    for lib in by_name(args.libraries):
        if args.report:
            saved = harness.saved_result(lib, args.root, args.eco_sample)
            if saved is None:
                continue
            results.append(saved)
            state = ""  # each library's section says which kiln it measured
        else:
            results.append(harness.measure(lib, args.root, args.eco_sample, args.rerun_jax,
                                           state, repos.get(lib.name)))
        text = report.render(results, args.top, state)
        with open(os.path.join(args.root, "report.md"), "w") as f:
            f.write(text + "\n")
    if not results:
        parser.error(f"no saved results in {args.root}/results")
    print(text)
    return 0


if __name__ == "__main__":
    sys.exit(main())
