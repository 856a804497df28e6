import sys, numpy as np, kiln, kiln.numpy as jnp
sys.path.insert(0, "examples"); import transformer as tr
L = int(sys.argv[1])
step = tr.make_step(kiln, jnp)
p, t = kiln.device_put(tr.init_params(L)), kiln.device_put(tr.tokens())
out = step(p, t); kiln.block_until_ready(out)
kiln._kiln.synchronize()
out = step(p, t); kiln.block_until_ready(out)
