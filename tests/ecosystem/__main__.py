"""Command line of the ecosystem harness: `python3 -m tests.ecosystem [LIB ...] [--eco-sample F]`.

Prints the table and writes it to build/ecosystem/report.md (README.md says what each column
means). Heavy: run it under `nice`, one library after another, one test process at a time.
"""
import argparse
import os
import signal
import sys

from . import harness, report
from .libraries import LIBRARIES, by_name


def main(argv=None):
    parser = argparse.ArgumentParser(prog="python3 -m tests.ecosystem", description=__doc__)
    parser.add_argument("libraries", nargs="*",
                        help=f"libraries to measure (default all): {[l.name for l in LIBRARIES]}")
    parser.add_argument("--eco-sample", type=float, default=0.1,
                        help="fraction of each suite to run, chosen by crc32 of the test id")
    parser.add_argument("--root", default=os.path.join(harness.REPO, "build", "ecosystem"),
                        help="cache and output folder (git-ignored)")
    parser.add_argument("--rerun-jax", action="store_true", help="ignore cached JAX results")
    parser.add_argument("--top", type=int, default=10, help="causes listed per library")
    args = parser.parse_args(argv)
    if not 0 < args.eco_sample <= 1:
        parser.error("--eco-sample must be in (0, 1]")
    # SIGTERM unwinds like Ctrl-C, so the running pytest process group is killed too
    signal.signal(signal.SIGTERM, lambda signum, frame: sys.exit(128 + signum))
    results = []
    for lib in by_name(args.libraries):
        results.append(harness.measure(lib, args.root, args.eco_sample, args.rerun_jax))
        text = report.render(results, args.top)
        with open(os.path.join(args.root, "report.md"), "w") as f:
            f.write(text + "\n")
    print(text)
    return 0


if __name__ == "__main__":
    sys.exit(main())
