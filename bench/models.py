"""GPT-2 small's training step in kiln, JAX and PyTorch: the model-scale figures of
shared/notes/BENCHMARKS.md ("Model-scale peer figures"), measured side by side.

The model: 124M parameters, 12 layers, width 768, 12 heads, batch 8 x 1,024 tokens, vocabulary
50,304, tied token embeddings, learned position embeddings, pre-layernorm blocks, a GELU (tanh) MLP
of 4x the width. f32 master weights; every matrix product casts both operands to bf16 and its bf16
result back to f32 (as PyTorch's autocast does); layernorm, softmax and the loss (mean over tokens
of logsumexp(logits) - logit[target]) in f32. AdamW written out (lr 3e-4, b1 0.9, b2 0.95, eps 1e-8,
weight decay 0.1 on every parameter, bias correction); the step
`params, opt_state, loss = step(params, opt_state, tokens, targets)` is jitted with
donate_argnums=(0, 1). kiln and JAX run one shared function body (make_step); PyTorch runs its
mirror (make_torch_step). Parameters and the batch come from NumPy with fixed seeds (GPT-2's
init: normal 0.02, residual projections 0.02/sqrt(2L)), the same on every side, so the first
losses agree (about ln 50304 = 10.83) and the last ones are close: the same batch every step.

Sides (one process each): kiln-einsum, kiln-dpa (kiln with the einsum + causal mask + softmax
attention, or jax.nn.dot_product_attention), jax-einsum, jax-dpa, jax-cudnn (real JAX; cudnn is
dot_product_attention(implementation='cudnn'), GPU only), torch-eager, torch-compile
(F.scaled_dot_product_attention; torch.compile of the whole step, optimizer included).

Each side prints one JSON line: the first call (trace + compile + one step, waited for), the
median step waited for after each call ("blocked"), N steps back to back waited for once, over N
("pipelined"), model TFLOP/s and MFU against 989 TFLOP/s (model FLOPs per step 6 N T + 12 L D S T
with N the parameters less the position embeddings, T the tokens per step), peak device memory
and the first and last loss. Every side starts with its compile caches on disk empty (kiln's
KILN_CACHE_DIR, PyTorch inductor's) or off (JAX's), so the first call is cold. The parent prints a
Markdown table, each side's pipelined step over the fastest peer's (JAX or PyTorch), and how far
each kiln side's losses are from JAX's.

    python3 bench/models.py                        # every side, full size (a GPU)
    python3 bench/models.py --small --sides kiln-einsum,kiln-dpa,jax-einsum,jax-dpa --steps 5
    PYTHONPATH=python python3 bench/models.py --side kiln-einsum --small   # one side: its JSON line

--small is the CPU size: 2 layers, width 128, 4 heads, batch 4 x 128 tokens, the vocabulary kept.
"""
import argparse
import json
import math
import os
import statistics
import subprocess
import sys
import tempfile
import time
import traceback

import numpy as np

SIDES = ("kiln-einsum", "kiln-dpa", "jax-einsum", "jax-dpa", "jax-cudnn", "torch-eager", "torch-compile")
FULL = dict(layers=12, width=768, heads=12, batch=8, seq=1024, vocab=50304)
SMALL = dict(layers=2, width=128, heads=4, batch=4, seq=128, vocab=50304)
PEAK_TFLOPS = 989.0  # H100 SXM dense bf16, BENCHMARKS.md's MFU denominator
LR, B1, B2, EPS, WD = 3e-4, 0.9, 0.95, 1e-8, 0.1
WARMUP = 2  # untimed steps between the first call and the timed ones
TRACE_DIR = None  # --trace: where kiln sides write a profile of three more steps
REPO = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
KILN_PATH = os.path.join(REPO, "python")


# ---------------------------------------------------------------- the data every side starts from

def init_params(cfg, seed=0):
    """GPT-2's initialization as float32 NumPy arrays: {"wte", "wpe", "lnf_g", "lnf_b", "blocks":
    [one dict per layer]}. Weights are (in, out): a layer computes x @ w + b."""
    rng = np.random.default_rng(seed)
    d, layers = cfg["width"], cfg["layers"]

    def normal(std, *shape):
        return (std * rng.standard_normal(shape, dtype=np.float32)).astype(np.float32)

    zeros, ones = (lambda n: np.zeros(n, np.float32)), (lambda n: np.ones(n, np.float32))
    residual_std = 0.02 / math.sqrt(2 * layers)  # the projections that add into the residual stream
    blocks = [{"ln1_g": ones(d), "ln1_b": zeros(d),
               "w_qkv": normal(0.02, d, 3 * d), "b_qkv": zeros(3 * d),
               "w_o": normal(residual_std, d, d), "b_o": zeros(d),
               "ln2_g": ones(d), "ln2_b": zeros(d),
               "w_fc": normal(0.02, d, 4 * d), "b_fc": zeros(4 * d),
               "w_proj": normal(residual_std, 4 * d, d), "b_proj": zeros(d)} for _ in range(layers)]
    return {"wte": normal(0.02, cfg["vocab"], d), "wpe": normal(0.02, cfg["seq"], d),
            "lnf_g": ones(d), "lnf_b": zeros(d), "blocks": blocks}


def leaves(params):
    """The parameter arrays in one fixed order (PyTorch's optimizer walks this list)."""
    top = [params[k] for k in ("wte", "wpe", "lnf_g", "lnf_b")]
    return top + [p[k] for p in params["blocks"] for k in sorted(p)]


def make_batch(cfg, seed=1):
    """int32 (tokens, targets), each [batch, seq]: targets are the tokens shifted by one."""
    toks = np.random.default_rng(seed).integers(0, cfg["vocab"], (cfg["batch"], cfg["seq"] + 1))
    return toks[:, :-1].astype(np.int32), toks[:, 1:].astype(np.int32)


def model_flops(cfg, n_params):
    """Model FLOPs of one training step, 6 N T + 12 L D S T (PaLM's count; T tokens per step)."""
    tokens = cfg["batch"] * cfg["seq"]
    return 6 * n_params * tokens + 12 * cfg["layers"] * cfg["width"] * cfg["seq"] * tokens


def counted_params(params):
    """N of model_flops: every parameter but the position embeddings (the tied embedding counts once)."""
    return sum(a.size for a in leaves(params)) - params["wpe"].size


# ---------------------------------------------------------------- kiln and JAX: one program

def make_step(jax, jnp, cfg, attention):
    """The jitted training step (params, opt_state, tokens, targets) -> (params, opt_state, loss)
    over JAX-like modules: kiln and JAX run this same body. opt_state is (m, v, step count).
    attention: 'einsum' (scores, causal mask and an f32 softmax written out), 'dpa'
    (jax.nn.dot_product_attention) or 'cudnn' (the same with implementation='cudnn')."""
    f32, bf16 = jnp.float32, jnp.bfloat16
    heads = cfg["heads"]
    tree_map = jax.tree_util.tree_map

    def mm(x, w):  # every product: bf16 operands, the bf16 result cast back to f32
        return (x.astype(bf16) @ w.astype(bf16)).astype(f32)

    def layernorm(x, g, b):
        mu = jnp.mean(x, axis=-1, keepdims=True)
        var = jnp.mean(jnp.square(x - mu), axis=-1, keepdims=True)
        return (x - mu) * jax.lax.rsqrt(var + 1e-5) * g + b

    def attend(q, k, v):  # bf16 [B, T, N, H] each -> bf16 [B, T, N, H]
        if attention != "einsum":
            impl = "cudnn" if attention == "cudnn" else None
            return jax.nn.dot_product_attention(q, k, v, is_causal=True, implementation=impl)
        t, h = q.shape[1], q.shape[3]
        s = jnp.einsum("btnh,bsnh->bnts", q, k).astype(f32) / np.float32(math.sqrt(h))
        s = jnp.where(jnp.tril(jnp.ones((t, t), dtype=bool)), s, np.float32(-1e9))
        p = jax.nn.softmax(s, axis=-1)
        return jnp.einsum("bnts,bsnh->btnh", p.astype(bf16), v)

    def block(p, x):
        b, t, d = x.shape
        qkv = mm(layernorm(x, p["ln1_g"], p["ln1_b"]), p["w_qkv"]) + p["b_qkv"]
        q, k, v = (a.reshape(b, t, heads, d // heads).astype(bf16) for a in jnp.split(qkv, 3, axis=-1))
        x = x + mm(attend(q, k, v).reshape(b, t, d), p["w_o"]) + p["b_o"]
        h = jax.nn.gelu(mm(layernorm(x, p["ln2_g"], p["ln2_b"]), p["w_fc"]) + p["b_fc"], approximate=True)
        return x + mm(h, p["w_proj"]) + p["b_proj"]

    def loss_fn(params, tokens, targets):
        x = params["wte"][tokens] + params["wpe"][: tokens.shape[1]]
        for p in params["blocks"]:
            x = block(p, x)
        logits = mm(layernorm(x, params["lnf_g"], params["lnf_b"]), params["wte"].T)
        target_logit = jnp.take_along_axis(logits, targets[..., None], axis=-1)[..., 0]
        return jnp.mean(jax.nn.logsumexp(logits, axis=-1) - target_logit)

    def step(params, opt_state, tokens, targets):
        loss, grads = jax.value_and_grad(loss_fn)(params, tokens, targets)
        m, v, count = opt_state
        count = count + 1
        m = tree_map(lambda m, g: B1 * m + (1 - B1) * g, m, grads)
        v = tree_map(lambda v, g: B2 * v + (1 - B2) * jnp.square(g), v, grads)
        c1, c2 = 1 - B1 ** count, 1 - B2 ** count
        params = tree_map(lambda p, m, v: p - LR * ((m / c1) / (jnp.sqrt(v / c2) + EPS) + WD * p),
                          params, m, v)
        return params, (m, v, count), loss

    return jax.jit(step, donate_argnums=(0, 1))


def run_jax_like(lib, attention, cfg, steps):
    """One kiln or JAX side: builds the step, times it, reads the peak memory."""
    import importlib
    jax = importlib.import_module(lib)
    jnp = importlib.import_module(lib + ".numpy")
    if lib == "jax" and os.path.abspath(jax.__file__).startswith(KILN_PATH):
        raise RuntimeError("jax resolved to kiln's tree: run real JAX with kiln off the path")
    device = jax.devices()[0]
    if attention == "cudnn" and device.platform != "gpu":
        return {"device": device.device_kind, "skipped": "cuDNN attention needs a GPU"}
    params = init_params(cfg)
    out = {"device": device.device_kind, "n_params": int(counted_params(params))}
    params = jax.device_put(params)
    zeros = jax.tree_util.tree_map(jnp.zeros_like, params)
    opt_state = (zeros, jax.tree_util.tree_map(jnp.zeros_like, params), jnp.zeros((), jnp.float32))
    tokens, targets = (jax.device_put(a) for a in make_batch(cfg))
    step = make_step(jax, jnp, cfg, attention)
    out.update(measure(step, params, opt_state, tokens, targets, jax.block_until_ready, steps))
    stats = device.memory_stats()
    out["peak_bytes"] = stats.get("peak_bytes_in_use") if stats else None
    if TRACE_DIR and lib == "kiln":  # three more steps under the profiler, summarized
        params = jax.device_put(init_params(cfg))  # (measure's were donated)
        opt_state = (jax.tree_util.tree_map(jnp.zeros_like, params),
                     jax.tree_util.tree_map(jnp.zeros_like, params), jnp.zeros((), jnp.float32))
        with jax.profiler.trace(TRACE_DIR):
            for _ in range(3):
                params, opt_state, loss = step(params, opt_state, tokens, targets)
            jax.block_until_ready(loss)
        out["trace"] = summarize_trace(TRACE_DIR, 3)
    return out


def summarize_trace(log_dir, steps):
    """Per step, from the newest kiln trace under log_dir: GPU time by event kind, the kernels
    taking the most time, and device-to-device copies."""
    import glob
    import gzip
    files = sorted(glob.glob(os.path.join(log_dir, "plugins", "profile", "*", "*.trace.json.gz")))
    if not files:
        return {"error": "no trace written"}
    with gzip.open(files[-1], "rt") as f:
        events = json.load(f)["traceEvents"]
    gpu = [e for e in events if e.get("ph") == "X" and e.get("pid", 0) >= 100]
    by_kind, by_name = {}, {}
    for e in gpu:
        by_kind[e["cat"]] = by_kind.get(e["cat"], 0) + e["dur"] / steps
        key = e["name"][:80]
        n, t = by_name.get(key, (0, 0.0))
        by_name[key] = (n + 1 / steps, t + e["dur"] / steps)
    top = sorted(by_name.items(), key=lambda kv: -kv[1][1])[:25]
    return {"file": files[-1], "gpu_us_per_step": {k: round(v, 1) for k, v in by_kind.items()},
            "d2d_copies_per_step": sum(1 for e in gpu if "DtoD" in e["name"] or "DeviceToDevice" in e["name"]) / steps,
            "top_kernels": [(name, round(n, 1), round(t, 1)) for name, (n, t) in top]}


# ---------------------------------------------------------------- PyTorch: the mirror

def make_torch_step(torch, cfg, compiled):
    """make_step's program in PyTorch with F.scaled_dot_product_attention: parameters are leaf
    tensors updated in place (and returned), the optimizer is AdamW written out with _foreach
    ops as torch.optim's multi-tensor AdamW runs it; compiled=True wraps the whole step in
    torch.compile (graph breaks where autograd is called)."""
    F = torch.nn.functional
    f32, bf16 = torch.float32, torch.bfloat16
    heads = cfg["heads"]

    def mm(x, w):
        return (x.to(bf16) @ w.to(bf16)).to(f32)

    def layernorm(x, g, b):
        return F.layer_norm(x, x.shape[-1:], g, b, eps=1e-5)

    def block(p, x):
        b, t, d = x.shape
        qkv = mm(layernorm(x, p["ln1_g"], p["ln1_b"]), p["w_qkv"]) + p["b_qkv"]
        q, k, v = (a.reshape(b, t, heads, d // heads).transpose(1, 2).to(bf16) for a in qkv.split(d, dim=-1))
        o = F.scaled_dot_product_attention(q, k, v, is_causal=True).transpose(1, 2).reshape(b, t, d)
        x = x + mm(o, p["w_o"]) + p["b_o"]
        h = F.gelu(mm(layernorm(x, p["ln2_g"], p["ln2_b"]), p["w_fc"]) + p["b_fc"], approximate="tanh")
        return x + mm(h, p["w_proj"]) + p["b_proj"]

    def loss_fn(params, tokens, targets):
        x = params["wte"][tokens] + params["wpe"][: tokens.shape[1]]
        for p in params["blocks"]:
            x = block(p, x)
        logits = mm(layernorm(x, params["lnf_g"], params["lnf_b"]), params["wte"].T)
        target_logit = logits.gather(-1, targets[..., None])[..., 0]
        return (torch.logsumexp(logits, dim=-1) - target_logit).mean()

    def step(params, opt_state, tokens, targets):
        ps = leaves(params)
        m, v, count = opt_state
        loss = loss_fn(params, tokens, targets)
        grads = torch.autograd.grad(loss, ps)
        with torch.no_grad():
            count += 1
            c1, c2 = 1 - B1 ** count, 1 - B2 ** count
            torch._foreach_lerp_(m, grads, 1 - B1)
            torch._foreach_mul_(v, B2)
            torch._foreach_addcmul_(v, grads, grads, value=1 - B2)
            denom = torch._foreach_div(v, c2)
            torch._foreach_sqrt_(denom)
            torch._foreach_add_(denom, EPS)
            update = torch._foreach_div(m, c1)
            torch._foreach_div_(update, denom)
            torch._foreach_add_(update, ps, alpha=WD)
            torch._foreach_add_(ps, update, alpha=-LR)
        return params, opt_state, loss.detach()

    return torch.compile(step) if compiled else step


def run_torch(variant, cfg, steps):
    """One PyTorch side, on CUDA when there is a GPU."""
    try:
        import torch
    except ImportError:
        return {"skipped": "torch is not importable"}
    cuda = torch.cuda.is_available()
    dev = torch.device("cuda" if cuda else "cpu")
    params = init_params(cfg)
    out = {"device": torch.cuda.get_device_name() if cuda else "cpu", "n_params": int(counted_params(params))}

    def to_dev(a):
        return torch.from_numpy(a).to(dev).requires_grad_()

    params = {k: ([{n: to_dev(a) for n, a in p.items()} for p in v] if k == "blocks" else to_dev(v))
              for k, v in params.items()}
    ps = leaves(params)
    opt_state = ([torch.zeros_like(p) for p in ps], [torch.zeros_like(p) for p in ps],
                 torch.zeros((), device=dev))
    tokens, targets = (torch.from_numpy(a.astype(np.int64)).to(dev) for a in make_batch(cfg))
    step = make_torch_step(torch, cfg, compiled=variant == "compile")

    def sync(_):
        if cuda:
            torch.cuda.synchronize()

    out.update(measure(step, params, opt_state, tokens, targets, sync, steps))
    out["peak_bytes"] = torch.cuda.max_memory_allocated() if cuda else None
    return out


# ---------------------------------------------------------------- timing, shared by every side

def measure(step, params, opt_state, tokens, targets, sync, steps):
    """First call, WARMUP untimed steps, `steps` steps each waited for (median), then `steps`
    steps back to back waited for once. sync(outputs) waits for a step's outputs."""
    t0 = time.perf_counter()
    params, opt_state, loss = step(params, opt_state, tokens, targets)
    sync((params, opt_state, loss))
    first_call = time.perf_counter() - t0
    first_loss = float(loss)
    for _ in range(WARMUP):
        params, opt_state, loss = step(params, opt_state, tokens, targets)
    sync((params, opt_state, loss))
    blocked = []
    for _ in range(steps):
        t0 = time.perf_counter()
        params, opt_state, loss = step(params, opt_state, tokens, targets)
        sync((params, opt_state, loss))
        blocked.append(time.perf_counter() - t0)
    t0 = time.perf_counter()
    for _ in range(steps):
        params, opt_state, loss = step(params, opt_state, tokens, targets)
    sync((params, opt_state, loss))
    pipelined = (time.perf_counter() - t0) / steps
    return {"first_call_s": first_call, "step_blocked_s": statistics.median(blocked),
            "step_pipelined_s": pipelined, "first_loss": first_loss, "last_loss": float(loss),
            "steps_run": 1 + WARMUP + 2 * steps}


def run_side(side, cfg, steps):
    """The JSON record of one side (the child process's whole job)."""
    lib, variant = side.split("-", 1)
    out = run_torch(variant, cfg, steps) if lib == "torch" else run_jax_like(lib, variant, cfg, steps)
    if "step_pipelined_s" in out:
        flops = model_flops(cfg, out["n_params"])
        out["model_tflop"] = flops / 1e12
        out["tflops"] = flops / out["step_pipelined_s"] / 1e12
        out["mfu"] = out["tflops"] / PEAK_TFLOPS
    return {"side": side, **out}


# ---------------------------------------------------------------- the parent: one process per side

def side_env(side, cache_dir):
    """The child's environment: kiln's python/ on PYTHONPATH for kiln sides, off it for the rest;
    every compile cache on disk empty (cache_dir) or off, so the first call is a cold compile."""
    env = dict(os.environ, KILN_CACHE_DIR=cache_dir, TORCHINDUCTOR_CACHE_DIR=cache_dir,
               JAX_ENABLE_COMPILATION_CACHE="false")
    path = [p for p in env.get("PYTHONPATH", "").split(os.pathsep)
            if p and os.path.abspath(p) != KILN_PATH]
    if side.startswith("kiln"):
        path.insert(0, KILN_PATH)
    env["PYTHONPATH"] = os.pathsep.join(path)
    return env


def run_child(side, cfg, steps, timeout):
    """Runs one side in a fresh process; its JSON record, or one saying why there is none."""
    cmd = [sys.executable, os.path.abspath(__file__), "--side", side, "--steps", str(steps)]
    if TRACE_DIR:
        cmd += ["--trace", os.path.join(TRACE_DIR, side)]
    for k, v in cfg.items():
        cmd += [f"--{k}", str(v)]
    try:
        with tempfile.TemporaryDirectory(prefix="kiln-models-") as cache_dir:
            proc = subprocess.run(cmd, env=side_env(side, cache_dir), capture_output=True, text=True,
                                  timeout=timeout)
    except subprocess.TimeoutExpired:
        return {"side": side, "error": f"timed out after {timeout} s"}
    lines = [ln for ln in proc.stdout.splitlines() if ln.startswith("{")]
    if lines:
        return json.loads(lines[-1])
    tail = (proc.stderr or proc.stdout).strip().splitlines()[-3:]
    return {"side": side, "error": f"exit {proc.returncode}: " + " | ".join(tail)}


def print_table(results):
    ok = [r for r in results if "step_pipelined_s" in r]
    peers = [r["step_pipelined_s"] for r in ok if not r["side"].startswith("kiln")]
    fastest = min(peers) if peers else None
    print("| side | step blocked | step pipelined | MFU | peak GiB | first call | loss first -> last "
          "| vs fastest peer |")
    print("|---|---|---|---|---|---|---|---|")
    for r in results:
        if "step_pipelined_s" not in r:
            why = f"skipped: {r['skipped']}" if "skipped" in r else f"failed: {r.get('error', '?')}"
            print(f"| {r['side']} | {why} |" + " |" * 6)
            continue
        peak = "-" if r["peak_bytes"] is None else f"{r['peak_bytes'] / 2**30:.2f}"
        ratio = "-" if fastest is None else f"{r['step_pipelined_s'] / fastest:.2f}x"
        print(f"| {r['side']} | {r['step_blocked_s'] * 1e3:.1f} ms | {r['step_pipelined_s'] * 1e3:.1f} ms "
              f"| {r['mfu'] * 100:.3g}% | {peak} | {r['first_call_s']:.1f} s "
              f"| {r['first_loss']:.4f} -> {r['last_loss']:.4f} | {ratio} |")


def print_loss_check(results):
    """Each kiln side's losses against JAX's with the same attention (else any JAX side)."""
    by_side = {r["side"]: r for r in results if "first_loss" in r}
    jax_sides = [s for s in by_side if s.startswith("jax")]
    for side in (s for s in by_side if s.startswith("kiln")):
        ref = "jax" + side[len("kiln"):]
        ref = ref if ref in by_side else (jax_sides[0] if jax_sides else None)
        if ref is None:
            continue
        a, b = by_side[side], by_side[ref]
        rel = [abs(a[k] - b[k]) / abs(b[k]) for k in ("first_loss", "last_loss")]
        print(f"{side} vs {ref}: first loss rel. diff {rel[0]:.1e}, last loss rel. diff {rel[1]:.1e}")


def main():
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--side", choices=SIDES, help="run one side in this process and print its JSON line")
    ap.add_argument("--sides", default=",".join(SIDES), help="comma-separated sides for the parent to run")
    ap.add_argument("--steps", type=int, default=20)
    ap.add_argument("--small", action="store_true", help="the CPU size (2 layers, width 128, batch 4 x 128)")
    for k in FULL:
        ap.add_argument(f"--{k}", type=int)
    ap.add_argument("--timeout", type=float, default=1800, help="seconds per side")
    ap.add_argument("--trace", help="kiln sides: also trace 3 steps with kiln.profiler into this folder and "
                                    "print where the GPU time goes")
    args = ap.parse_args()
    global TRACE_DIR
    TRACE_DIR = args.trace and os.path.abspath(args.trace)
    cfg = dict(SMALL if args.small else FULL)
    cfg.update({k: getattr(args, k) for k in FULL if getattr(args, k) is not None})

    if args.side:
        try:
            record = run_side(args.side, cfg, args.steps)
        except Exception as e:
            traceback.print_exc()
            record = {"side": args.side, "error": f"{type(e).__name__}: {e}".splitlines()[0][:300]}
        print(json.dumps(record), flush=True)
        sys.exit(1 if "error" in record else 0)

    flops = model_flops(cfg, counted_params(init_params(cfg)))
    print("config: " + ", ".join(f"{k} {v}" for k, v in cfg.items())
          + f"; {flops / 1e12:.3f} model TFLOP per step; {args.steps} steps timed", flush=True)
    results = []
    for side in args.sides.split(","):
        r = run_child(side.strip(), cfg, args.steps, args.timeout)
        print(json.dumps(r), flush=True)
        results.append(r)
    print("\ndevice: " + ", ".join(sorted({r["device"] for r in results if "device" in r})) + "\n")
    print_table(results)
    print()
    print_loss_check(results)
    for r in results:
        if "trace" in r:
            t = r["trace"]
            print(f"\n{r['side']}: trace {t.get('file', t.get('error'))}")
            if "gpu_us_per_step" in t:
                print(f"  GPU us per step by kind: {t['gpu_us_per_step']}; device-to-device copies per step: "
                      f"{t['d2d_copies_per_step']:g}")
                for name, n, us in t["top_kernels"]:
                    print(f"  {us:10.1f} us  {n:6.1f}x  {name}")


if __name__ == "__main__":
    main()
