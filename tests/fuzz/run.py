"""Command line: `python3 -m tests.fuzz [-n N] [--seed S] ...` runs a campaign and prints counts
by class; `--replay` re-checks the saved regressions. See tests/fuzz/README.md."""
import argparse
import glob
import os
import sys

from .campaign import HERE, REGRESSIONS, Campaign, replay
from .compare import CLASSES


def main(argv=None):
    ap = argparse.ArgumentParser(prog="python3 -m tests.fuzz", description=__doc__)
    ap.add_argument("-n", type=int, default=int(os.environ.get("FUZZ_N", 2000)), help="programs (FUZZ_N)")
    ap.add_argument("--seed", type=int, default=int(os.environ.get("FUZZ_SEED", 0)), help="first seed (FUZZ_SEED)")
    ap.add_argument("--workers", type=int, default=int(os.environ.get("FUZZ_WORKERS", 2)))
    ap.add_argument("--time-limit", type=float, default=None, help="stop handing out programs after this many seconds")
    ap.add_argument("--nice", type=int, default=0, help="niceness of the worker processes")
    ap.add_argument("--max-stmts", type=int, default=4)
    ap.add_argument("--no-shrink", action="store_true", help="isolate signatures only, keep input shapes")
    ap.add_argument("--report", default=os.path.join(HERE, "last_report.md"))
    ap.add_argument("--save-regressions", action="store_true", help="write regressions/*.json, one per (class, op)")
    ap.add_argument("--regressions-dir", default=None, help="where --save-regressions writes (default tests/fuzz/regressions)")
    ap.add_argument("--replay", action="store_true", help="re-check the saved regressions (--regressions-dir, default tests/fuzz/regressions) and exit")
    ap.add_argument("--triage", action="store_true", help="print the saved regressions grouped by (class, op)")
    args = ap.parse_args(argv)

    if args.triage:
        from .triage import load, markdown
        print(markdown(load()))
        return 0
    if args.replay:
        fixed = 0
        paths = None
        if args.regressions_dir:
            paths = sorted(glob.glob(os.path.join(args.regressions_dir, "*.json")))
        for path, sig, cls, res in replay(paths):
            status = "fixed" if cls == "ok" else cls
            fixed += cls == "ok"
            print(f"{status:16s} {'/'.join(sig)}  ({os.path.basename(path)})")
        print(f"{fixed} fixed")
        return 0

    camp = Campaign(workers=args.workers, nice=args.nice, shrink=not args.no_shrink,
                    log=lambda m: print(m, flush=True), gen_opts={"max_stmts": args.max_stmts},
                    checkpoint=args.report)
    camp.run(range(args.seed, args.seed + args.n), time_limit=args.time_limit)
    print(camp.progress_line())
    print("\nfailing checks by class:")
    for c in CLASSES:
        print(f"  {c:16s} {camp.counts[c]:6d}   ({sum(1 for d in camp.defects.values() if d.cls == c)} signatures)")
    with open(args.report, "w") as f:
        f.write(camp.report())
    print(f"report: {args.report}")
    if args.save_regressions:
        out = args.regressions_dir or REGRESSIONS
        print(f"{len(camp.save_regressions(out))} regression files in {out}")
    new = camp.unknown()
    if new:
        print(f"{len(new)} signatures not in tests/fuzz/known.py")
    return 0


if __name__ == "__main__":
    sys.exit(main())
