import sys, time, numpy as np, kiln, kiln.numpy as jnp
sys.path.insert(0, "examples"); import transformer as tr
for L in (2, 8):
    step = tr.make_step(kiln, jnp)
    p, t = kiln.device_put(tr.init_params(L)), kiln.device_put(tr.tokens())
    out = step(p, t); kiln.block_until_ready(out)
    host, total = [], []
    for i in range(20):
        kiln.block_until_ready(out)
        t0 = time.perf_counter(); out = step(p, t); t1 = time.perf_counter(); kiln.block_until_ready(out); t2 = time.perf_counter()
        host.append(t1 - t0); total.append(t2 - t0)
    exe = list(step._cache.values())[0].exe
    print(f"L={L} steps {exe.num_steps} host {np.median(host)*1e3:.3f} ms total {np.median(total)*1e3:.3f} ms")
