import csv, sys, collections
rows = list(csv.reader(open(sys.argv[1])))
hdr = None
data = []
for r in rows:
    if "Kernel Name" in r:
        hdr = r; continue
    if hdr and len(r) == len(hdr):
        d = dict(zip(hdr, r))
        if d.get("Metric Name") == "gpu__time_duration.sum":
            data.append((d["Kernel Name"], float(d["Metric Value"].replace(",", "")), d.get("Grid Size", ""), d.get("Block Size", "")))
n = int(sys.argv[2])
data = data[-n:]  # the last call
tot = sum(x[1] for x in data)
print("kernels", len(data), "total us", tot / 1e3)
agg = collections.defaultdict(lambda: [0, 0.0])
for name, t, g, b in data:
    key = name[:60]
    agg[key][0] += 1; agg[key][1] += t
for k, (c, t) in sorted(agg.items(), key=lambda kv: -kv[1][1])[:25]:
    print(f"{t/1e3:9.1f} us {c:4d}x {k}")
print("slowest single:")
for name, t, g, b in sorted(data, key=lambda x: -x[1])[:12]:
    print(f"{t/1e3:8.1f} us grid {g} block {b} {name[:70]}")
