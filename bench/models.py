"""GPT-2 small's and ResNet-50's training steps in kiln, JAX and PyTorch: the model-scale figures of
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

--model resnet50: ResNet-50 v1.5's training step (issue 34): batch 128 of 224x224x3 images, NHWC,
bottleneck blocks [3, 4, 6, 3] of widths 64/128/256/512 (x4 out), the stride on the 3x3 convolution,
a 7x7 stride-2 stem and a 3x3 stride-2 max pool (lax.reduce_window), global average pool, a dense
head of 1,000 classes. Convolutions (lax.conv_general_dilated, ('NHWC', 'HWIO', 'NHWC')) and the
head cast both operands to bf16 and the result back to f32; batch norm in training mode in f32
(biased batch statistics over N, H, W; eps 1e-5), its running mean and variance updated with
momentum 0.9 and returned as state, not differentiated; the loss is softmax cross-entropy on
integer labels. SGD written out: momentum 0.9, lr 0.1, weight decay 5e-5 on every parameter added
to the gradient (torch.optim.SGD's form). The step `params, (momentum, bn_state), loss =
step(params, (momentum, bn_state), images, labels)` is jitted with donate_argnums=(0, 1): params,
momentum and batch-norm state are all donated. Parameters from NumPy (He-normal fan-out
convolutions as torchvision, the last batch-norm scale of each block zero, the head normal 0.01),
so the first loss is about ln 1000 = 6.91 on every side (the same batch every step: at --small the
loss is near 1e-4 within ten steps, where the last losses' relative difference says little; bf16
products leave kiln's and JAX's gradients of the stem and the projections tens of percent apart
after one step, each as far from a float64 reference, where in float32 they agree to 1e-5). Sides: kiln, jax, torch-eager,
torch-compile (channels_last, F.conv2d and F.batch_norm, whose running variance is the unbiased
one: the state differs slightly, the losses do not). Model FLOPs per step: 3 x the forward pass's,
counted from the shapes as 2 x the multiply-adds of every convolution and the head (8.2 GFLOP per
224x224 image: ResNet-50's "4.1 GFLOPs" are multiply-adds), 3.14 TFLOP per step at batch 128.

    python3 bench/models.py --model resnet50      # kiln, jax, torch-eager, torch-compile (a GPU)
    python3 bench/models.py --model resnet50 --small --sides kiln,jax --steps 3

--small for resnet50 is batch 8 of 64x64 images, the architecture kept.
"""
import argparse
import collections
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
RESNET_SIDES = ("kiln", "jax", "torch-eager", "torch-compile")
RESNET_FULL = dict(batch=128, image=224, classes=1000)
RESNET_SMALL = dict(batch=8, image=64, classes=1000)
RESNET_STAGES = ((64, 3, 1), (128, 4, 2), (256, 6, 2), (512, 3, 2))  # (width, blocks, stride)
EXPANSION = 4  # a bottleneck block's output is 4x its width
SGD_LR, SGD_MOMENTUM, SGD_WD = 0.1, 0.9, 5e-5
BN_MOMENTUM, BN_EPS = 0.9, 1e-5
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


def gpt2_jax_state(jax, jnp, cfg):
    """GPT-2's (params, opt_state, tokens, targets) on the device: AdamW's m and v zero, count 0."""
    params = jax.device_put(init_params(cfg))
    opt_state = (jax.tree_util.tree_map(jnp.zeros_like, params),
                 jax.tree_util.tree_map(jnp.zeros_like, params), jnp.zeros((), jnp.float32))
    tokens, targets = (jax.device_put(a) for a in make_batch(cfg))
    return params, opt_state, tokens, targets


def run_jax_like(model, lib, variant, cfg, steps):
    """One kiln or JAX side: builds the step, times it, reads the peak memory."""
    import importlib
    jax = importlib.import_module(lib)
    jnp = importlib.import_module(lib + ".numpy")
    if lib == "jax" and os.path.abspath(jax.__file__).startswith(KILN_PATH):
        raise RuntimeError("jax resolved to kiln's tree: run real JAX with kiln off the path")
    device = jax.devices()[0]
    if variant == "cudnn" and device.platform != "gpu":
        return {"device": device.device_kind, "skipped": "cuDNN attention needs a GPU"}
    out = {"device": device.device_kind, "n_params": int(model.n_params(cfg))}
    step = model.make_step(jax, jnp, cfg, variant)
    state = model.jax_state(jax, jnp, cfg)
    out.update(measure(step, *state, jax.block_until_ready, steps))
    stats = device.memory_stats()
    out["peak_bytes"] = stats.get("peak_bytes_in_use") if stats else None
    if TRACE_DIR and lib == "kiln":  # three more steps under the profiler, summarized
        params, opt_state, x, y = model.jax_state(jax, jnp, cfg)  # (measure's were donated)
        with jax.profiler.trace(TRACE_DIR):
            for _ in range(3):
                params, opt_state, loss = step(params, opt_state, x, y)
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


def gpt2_torch_state(torch, dev, cfg):
    """GPT-2's (params, opt_state, tokens, targets) as PyTorch tensors on dev."""
    params = init_params(cfg)

    def to_dev(a):
        return torch.from_numpy(a).to(dev).requires_grad_()

    params = {k: ([{n: to_dev(a) for n, a in p.items()} for p in v] if k == "blocks" else to_dev(v))
              for k, v in params.items()}
    ps = leaves(params)
    opt_state = ([torch.zeros_like(p) for p in ps], [torch.zeros_like(p) for p in ps],
                 torch.zeros((), device=dev))
    tokens, targets = (torch.from_numpy(a.astype(np.int64)).to(dev) for a in make_batch(cfg))
    return params, opt_state, tokens, targets


def run_torch(model, variant, cfg, steps):
    """One PyTorch side, on CUDA when there is a GPU."""
    try:
        import torch
    except ImportError:
        return {"skipped": "torch is not importable"}
    cuda = torch.cuda.is_available()
    dev = torch.device("cuda" if cuda else "cpu")
    out = {"device": torch.cuda.get_device_name() if cuda else "cpu", "n_params": int(model.n_params(cfg))}
    state = model.torch_state(torch, dev, cfg)
    step = model.make_torch_step(torch, cfg, compiled=variant == "compile")

    def sync(_):
        if cuda:
            torch.cuda.synchronize()

    out.update(measure(step, *state, sync, steps))
    out["peak_bytes"] = torch.cuda.max_memory_allocated() if cuda else None
    return out


# ---------------------------------------------------------------- ResNet-50: the data, both programs

def resnet_blocks():
    """ResNet-50's bottleneck blocks in order: (name, in channels, width, stride, projection?). The
    stride sits on the 3x3 convolution (v1.5); the first block of each stage projects its shortcut."""
    blocks, cin = [], 64
    for s, (width, count, stride) in enumerate(RESNET_STAGES):
        for b in range(count):
            blocks.append((f"s{s + 1}b{b}", cin, width, stride if b == 0 else 1, b == 0))
            cin = width * EXPANSION
    return blocks


def resnet_convs(cfg):
    """Every convolution as (unit, kernel, in channels, out channels, stride, output size), the
    stem's first, then each block's c1, c2, c3 and proj; the input is image x image."""
    out = [("stem", 7, 3, 64, 2, (cfg["image"] + 2 * 3 - 7) // 2 + 1)]
    size = (out[0][5] + 2 - 3) // 2 + 1  # after the max pool
    for name, cin, width, stride, proj in resnet_blocks():
        half = (size + 2 - 3) // stride + 1
        out += [(name + "c1", 1, cin, width, 1, size), (name + "c2", 3, width, width, stride, half),
                (name + "c3", 1, width, width * EXPANSION, 1, half)]
        if proj:
            out.append((name + "proj", 1, cin, width * EXPANSION, stride, half))
        size = half
    return out


def resnet_init(cfg, seed=0):
    """(params, bn_state) as flat dicts of float32 NumPy arrays. Each convolution unit u has u_w
    (HWIO, He-normal over the fan-out), u_g and u_b (batch-norm scale and shift; the scale of a
    block's c3 zero, so each block starts as its shortcut) in params, u_mean and u_var in bn_state;
    then fc_w (2048, classes; normal 0.01) and fc_b."""
    rng = np.random.default_rng(seed)
    params, bn_state = {}, {}
    for unit, k, cin, cout, _, _ in resnet_convs(cfg):
        std = math.sqrt(2.0 / (k * k * cout))
        params[unit + "_w"] = (std * rng.standard_normal((k, k, cin, cout), dtype=np.float32)).astype(np.float32)
        params[unit + "_g"] = np.full(cout, 0.0 if unit.endswith("c3") else 1.0, np.float32)
        params[unit + "_b"] = np.zeros(cout, np.float32)
        bn_state[unit + "_mean"], bn_state[unit + "_var"] = np.zeros(cout, np.float32), np.ones(cout, np.float32)
    features = RESNET_STAGES[-1][0] * EXPANSION
    params["fc_w"] = (0.01 * rng.standard_normal((features, cfg["classes"]), dtype=np.float32)).astype(np.float32)
    params["fc_b"] = np.zeros(cfg["classes"], np.float32)
    return params, bn_state


def resnet_batch(cfg, seed=1):
    """(images float32 [batch, image, image, 3], standard normal; labels int32 [batch])."""
    rng = np.random.default_rng(seed)
    images = rng.standard_normal((cfg["batch"], cfg["image"], cfg["image"], 3), dtype=np.float32)
    return images, rng.integers(0, cfg["classes"], cfg["batch"]).astype(np.int32)


def resnet_flops(cfg, n_params=None):
    """Model FLOPs of one training step: 3 x the forward pass's 2 x multiply-adds of every
    convolution and of the head (batch norm, pooling and the loss not counted)."""
    macs = sum(k * k * cin * cout * size * size for _, k, cin, cout, _, size in resnet_convs(cfg))
    macs += RESNET_STAGES[-1][0] * EXPANSION * cfg["classes"]
    return 3 * 2 * macs * cfg["batch"]


def resnet_n_params(cfg):
    return sum(a.size for a in resnet_init(cfg)[0].values())


def make_resnet_step(jax, jnp, cfg, variant=None):
    """The jitted training step (params, (momentum, bn_state), images, labels) -> (params,
    (momentum, bn_state), loss) over JAX-like modules: kiln and JAX run this same body."""
    lax = jax.lax
    f32, bf16 = jnp.float32, jnp.bfloat16
    tree_map = jax.tree_util.tree_map

    def conv(x, w, stride):  # bf16 operands, the bf16 result cast back to f32; 'same' padding
        pad = (w.shape[0] - 1) // 2
        y = lax.conv_general_dilated(x.astype(bf16), w.astype(bf16), (stride, stride), ((pad, pad), (pad, pad)),
                                     dimension_numbers=("NHWC", "HWIO", "NHWC"))
        return y.astype(f32)

    def conv_bn(x, params, bn, new_bn, unit, stride, relu):
        """conv, then batch norm with this batch's statistics; the running ones go to new_bn."""
        y = conv(x, params[unit + "_w"], stride)
        mean = jnp.mean(y, axis=(0, 1, 2))
        var = jnp.mean(jnp.square(y - mean), axis=(0, 1, 2))
        for stat, value in (("_mean", mean), ("_var", var)):
            new_bn[unit + stat] = BN_MOMENTUM * bn[unit + stat] + (1 - BN_MOMENTUM) * lax.stop_gradient(value)
        y = (y - mean) * lax.rsqrt(var + BN_EPS) * params[unit + "_g"] + params[unit + "_b"]
        return jax.nn.relu(y) if relu else y

    def loss_fn(params, bn, images, labels):
        new_bn = {}
        x = conv_bn(images, params, bn, new_bn, "stem", 2, True)
        x = lax.reduce_window(x, -jnp.inf, lax.max, (1, 3, 3, 1), (1, 2, 2, 1), ((0, 0), (1, 1), (1, 1), (0, 0)))
        for name, _, _, stride, proj in resnet_blocks():
            h = conv_bn(x, params, bn, new_bn, name + "c1", 1, True)
            h = conv_bn(h, params, bn, new_bn, name + "c2", stride, True)
            h = conv_bn(h, params, bn, new_bn, name + "c3", 1, False)
            shortcut = conv_bn(x, params, bn, new_bn, name + "proj", stride, False) if proj else x
            x = jax.nn.relu(h + shortcut)
        x = jnp.mean(x, axis=(1, 2))
        logits = (x.astype(bf16) @ params["fc_w"].astype(bf16)).astype(f32) + params["fc_b"]
        target_logit = jnp.take_along_axis(logits, labels[:, None], axis=-1)[:, 0]
        return jnp.mean(jax.nn.logsumexp(logits, axis=-1) - target_logit), new_bn

    def step(params, opt_state, images, labels):
        momentum, bn = opt_state
        (loss, bn), grads = jax.value_and_grad(loss_fn, has_aux=True)(params, bn, images, labels)
        momentum = tree_map(lambda m, g, p: SGD_MOMENTUM * m + (g + SGD_WD * p), momentum, grads, params)
        params = tree_map(lambda p, m: p - SGD_LR * m, params, momentum)
        return params, (momentum, bn), loss

    return jax.jit(step, donate_argnums=(0, 1))


def resnet_jax_state(jax, jnp, cfg):
    """ResNet-50's (params, (momentum, bn_state), images, labels) on the device, momentum zero."""
    params, bn_state = resnet_init(cfg)
    params, bn_state = jax.device_put(params), jax.device_put(bn_state)
    images, labels = (jax.device_put(a) for a in resnet_batch(cfg))
    return params, (jax.tree_util.tree_map(jnp.zeros_like, params), bn_state), images, labels


def make_torch_resnet_step(torch, cfg, compiled):
    """make_resnet_step's program in PyTorch, channels_last: weights OIHW, F.conv2d on bf16
    operands, F.batch_norm in training mode updating the running statistics in place (momentum
    0.1 in PyTorch's sense is 0.9 in ours), SGD with _foreach ops as torch.optim's multi-tensor SGD;
    compiled=True wraps the whole step in torch.compile."""
    F = torch.nn.functional
    f32, bf16 = torch.float32, torch.bfloat16

    def conv_bn(x, params, bn, unit, stride, relu):
        w = params[unit + "_w"]
        y = F.conv2d(x.to(bf16), w.to(bf16), stride=stride, padding=(w.shape[-1] - 1) // 2).to(f32)
        y = F.batch_norm(y, bn[unit + "_mean"], bn[unit + "_var"], params[unit + "_g"], params[unit + "_b"],
                         training=True, momentum=1 - BN_MOMENTUM, eps=BN_EPS)
        return F.relu(y) if relu else y

    def loss_fn(params, bn, images, labels):
        x = F.max_pool2d(conv_bn(images, params, bn, "stem", 2, True), 3, 2, 1)
        for name, _, _, stride, proj in resnet_blocks():
            h = conv_bn(x, params, bn, name + "c1", 1, True)
            h = conv_bn(h, params, bn, name + "c2", stride, True)
            h = conv_bn(h, params, bn, name + "c3", 1, False)
            shortcut = conv_bn(x, params, bn, name + "proj", stride, False) if proj else x
            x = F.relu(h + shortcut)
        x = x.mean(dim=(2, 3))
        logits = (x.to(bf16) @ params["fc_w"].to(bf16)).to(f32) + params["fc_b"]
        target_logit = logits.gather(-1, labels[:, None])[:, 0]
        return (torch.logsumexp(logits, dim=-1) - target_logit).mean()

    def step(params, opt_state, images, labels):
        ps = list(params.values())
        momentum, bn = opt_state
        loss = loss_fn(params, bn, images, labels)
        grads = torch.autograd.grad(loss, ps)
        with torch.no_grad():
            grads = torch._foreach_add(grads, ps, alpha=SGD_WD)
            torch._foreach_mul_(momentum, SGD_MOMENTUM)
            torch._foreach_add_(momentum, grads)
            torch._foreach_add_(ps, momentum, alpha=-SGD_LR)
        return params, opt_state, loss.detach()

    return torch.compile(step) if compiled else step


def resnet_torch_state(torch, dev, cfg):
    """ResNet-50's (params, (momentum, bn_state), images, labels) as PyTorch tensors on dev:
    convolution weights OIHW and images NCHW, both in channels_last memory (NHWC underneath)."""
    params, bn_state = resnet_init(cfg)
    cl = torch.channels_last

    def param(a):
        if a.ndim == 4:  # HWIO -> OIHW, stored channels_last
            return torch.from_numpy(a).to(dev).permute(3, 2, 0, 1).contiguous(memory_format=cl).requires_grad_()
        return torch.from_numpy(a).to(dev).requires_grad_()

    params = {k: param(a) for k, a in params.items()}
    bn_state = {k: torch.from_numpy(a).to(dev) for k, a in bn_state.items()}
    momentum = [torch.zeros_like(p) for p in params.values()]
    images, labels = resnet_batch(cfg)
    images = torch.from_numpy(images).to(dev).permute(0, 3, 1, 2)  # NCHW view of NHWC: channels_last
    return params, (momentum, bn_state), images, torch.from_numpy(labels.astype(np.int64)).to(dev)


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


# What the runners need of a model: its sides and sizes, its parameter count and model FLOPs per
# step, and for each library the step and the device state it starts from.
Model = collections.namedtuple("Model", "sides full small n_params flops make_step jax_state "
                                        "make_torch_step torch_state")
MODELS = {
    "gpt2": Model(SIDES, FULL, SMALL, lambda cfg: counted_params(init_params(cfg)), model_flops, make_step,
                  gpt2_jax_state, make_torch_step, gpt2_torch_state),
    "resnet50": Model(RESNET_SIDES, RESNET_FULL, RESNET_SMALL, resnet_n_params, resnet_flops, make_resnet_step,
                      resnet_jax_state, make_torch_resnet_step, resnet_torch_state),
}


def run_side(model, side, cfg, steps):
    """The JSON record of one side (the child process's whole job)."""
    lib, _, variant = side.partition("-")
    out = run_torch(model, variant, cfg, steps) if lib == "torch" else run_jax_like(model, lib, variant, cfg, steps)
    if "step_pipelined_s" in out:
        flops = model.flops(cfg, out["n_params"])
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


def run_child(model_name, side, cfg, steps, timeout):
    """Runs one side in a fresh process; its JSON record, or one saying why there is none."""
    cmd = [sys.executable, os.path.abspath(__file__), "--model", model_name, "--side", side, "--steps", str(steps)]
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
    ap.add_argument("--model", choices=MODELS, default="gpt2")
    ap.add_argument("--side", choices=SIDES + tuple(s for s in RESNET_SIDES if s not in SIDES),
                    help="run one side in this process and print its JSON line")
    ap.add_argument("--sides", help="comma-separated sides for the parent to run (default: all of the model's)")
    ap.add_argument("--steps", type=int, default=20)
    ap.add_argument("--small", action="store_true", help="the CPU size (GPT-2: 2 layers, width 128, batch 4 x 128; "
                                                         "ResNet-50: batch 8 of 64x64 images)")
    sizes = {**FULL, **RESNET_FULL}
    for k in sizes:
        ap.add_argument(f"--{k}", type=int)
    ap.add_argument("--timeout", type=float, default=1800, help="seconds per side")
    ap.add_argument("--trace", help="kiln sides: also trace 3 steps with kiln.profiler into this folder and "
                                    "print where the GPU time goes")
    args = ap.parse_args()
    global TRACE_DIR
    TRACE_DIR = args.trace and os.path.abspath(args.trace)
    model = MODELS[args.model]
    cfg = dict(model.small if args.small else model.full)
    for k in sizes:
        if getattr(args, k) is not None:
            if k not in cfg:
                ap.error(f"--{k} is not a size of {args.model} (those are {', '.join(cfg)})")
            cfg[k] = getattr(args, k)
    sides = [s.strip() for s in args.sides.split(",")] if args.sides else list(model.sides)
    for side in sides + [args.side] * bool(args.side):
        if side not in model.sides:
            ap.error(f"{args.model} has no side {side!r} (its sides: {', '.join(model.sides)})")

    if args.side:
        try:
            record = run_side(model, args.side, cfg, args.steps)
        except Exception as e:
            traceback.print_exc()
            record = {"side": args.side, "error": f"{type(e).__name__}: {e}".splitlines()[0][:300]}
        print(json.dumps(record), flush=True)
        sys.exit(1 if "error" in record else 0)

    flops = model.flops(cfg, model.n_params(cfg))
    print("config: " + ", ".join(f"{k} {v}" for k, v in cfg.items())
          + f"; {flops / 1e12:.3f} model TFLOP per step; {args.steps} steps timed", flush=True)
    results = []
    for side in sides:
        r = run_child(args.model, side, cfg, args.steps, args.timeout)
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
