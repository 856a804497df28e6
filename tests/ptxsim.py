"""A small PTX interpreter for testing kiln's hand-written kernels without a GPU.

It runs the subset of PTX that runtime/gpusort_ptx.c writes (integer arithmetic, predicates,
global/shared/param memory, shared and global reductions, bar.sync, and the warp collectives
match.any, shfl.up, vote.ballot) one block at a time, the threads of a block in lockstep: the
threads at the lowest program counter run one instruction together, vectorized with NumPy, so
divergent branches reconverge and warp collectives see whole warps (asserted). Global memory is
the host memory of NumPy arrays registered as regions; every access is bounds- and
alignment-checked and two threads storing to one address in one instruction is an error, so a
wrong index fails loudly instead of corrupting memory. Blocks run one after another, which is
one of the schedules a GPU may pick: a block that waits for a later one (a spin wait) would hang
here; the sort's look-back waits only for earlier tiles, numbered in the order blocks start, so
here it never waits. Memory-ordering qualifiers (volatile, relaxed, ...) are accepted and ignored.
"""
import re

import numpy as np

_WIDTH = {"u8": 8, "s8": 8, "b8": 8, "u16": 16, "s16": 16, "b16": 16, "u32": 32, "s32": 32, "b32": 32,
          "u64": 64, "s64": 64, "b64": 64, "pred": 1}


def _mask(w):
    return np.uint64((1 << w) - 1) if w < 64 else np.uint64(0xFFFFFFFFFFFFFFFF)


def _signed(v, w):
    v = v.astype(np.uint64) & _mask(w)
    if w == 64:
        return v.view(np.int64)
    s = v.astype(np.int64)
    return np.where(s >= (1 << (w - 1)), s - (1 << w), s)


class PtxError(Exception):
    pass


class Kernel:
    def __init__(self, name, params, body):
        self.name, self.params = name, params
        self.shared, self.shared_bytes = {}, 0
        self.code, self.labels = [], {}
        for line in body:
            if line.startswith(".reg"):
                continue
            if line.startswith(".shared"):
                m = re.match(r"\.shared\s+\.align\s+(\d+)\s+\.b8\s+(\w+)\[(\d+)\]", line)
                align, nm, size = int(m.group(1)), m.group(2), int(m.group(3))
                self.shared_bytes = (self.shared_bytes + align - 1) // align * align
                self.shared[nm] = self.shared_bytes
                self.shared_bytes += size
                continue
            if line.endswith(":"):
                self.labels[line[:-1]] = len(self.code)
                continue
            self.code.append(_parse_ins(line))


def _split_operands(s):
    out, depth, cur = [], 0, ""
    for ch in s:
        if ch == "[":
            depth += 1
        elif ch == "]":
            depth -= 1
        if ch == "," and depth == 0:
            out.append(cur.strip())
            cur = ""
        else:
            cur += ch
    if cur.strip():
        out.append(cur.strip())
    return out


_ORDERING = {"volatile", "relaxed", "acquire", "release", "gpu", "sys", "cta"}


def _parse_ins(line):
    line = line.rstrip(";").strip()
    pred = neg = None
    if line.startswith("@"):
        g, line = line.split(None, 1)
        neg = g.startswith("@!")
        pred = g[2:] if neg else g[1:]
    parts = line.split(None, 1)
    op = [q for q in parts[0].split(".") if q not in _ORDERING]  # (one block at a time: nothing to order)
    ops = _split_operands(parts[1]) if len(parts) > 1 else []
    return (pred, neg, op, ops, line)


def parse_module(text):
    text = re.sub(r"//[^\n]*", "", text)
    kernels = {}
    for m in re.finditer(r"\.entry\s+(\w+)\s*\(([^)]*)\)\s*(?:\.\w+[^{]*)?\{", text):  # (.maxnreg n)
        name = m.group(1)
        params = [p.split()[-1] for p in m.group(2).split(",") if p.strip()]
        depth, i = 1, m.end()
        while depth:
            depth += {"{": 1, "}": -1}.get(text[i], 0)
            i += 1
        body = [ln.strip() for ln in text[m.end():i - 1].split("\n")]
        body = [b for ln in body for b in ([ln] if ln.endswith(":") else [x.strip() + ";" for x in ln.split(";") if x.strip()])]
        kernels[name] = Kernel(name, params, [b.rstrip(";") if b.endswith(":;") else b for b in body if b])
    return kernels


class Memory:
    """Global memory: regions of host memory (NumPy arrays) at their real addresses."""

    def __init__(self):
        self.regions = []  # (base, uint8 view)

    def add(self, arr):
        a8 = arr.reshape(-1).view(np.uint8)
        self.regions.append((arr.ctypes.data, a8))
        self.regions.sort(key=lambda r: r[0])
        return arr.ctypes.data

    def locate(self, addr, size):
        bases = np.array([r[0] for r in self.regions], dtype=np.uint64)
        k = np.searchsorted(bases, addr, side="right") - 1
        out = []
        for r in np.unique(k):
            if r < 0:
                raise PtxError(f"global access below every region: {hex(int(addr.min()))}")
            base, a8 = self.regions[r]
            sel = np.nonzero(k == r)[0]
            off = (addr[sel] - np.uint64(base)).astype(np.int64)
            if (off + size > a8.size).any():
                bad = int(off[off + size > a8.size][0])
                raise PtxError(f"global access out of bounds: offset {bad} of a {a8.size}-byte region")
            out.append((a8, sel, off))
        return out


def _load(a8, off, size):
    if (off % size).any():
        raise PtxError("misaligned access")
    b = a8[off[:, None] + np.arange(size)].astype(np.uint64)
    return (b << (np.arange(size, dtype=np.uint64) * np.uint64(8))).sum(axis=1, dtype=np.uint64)


def _store(a8, off, size, v):
    if (off % size).any():
        raise PtxError("misaligned access")
    if len(np.unique(off)) != len(off):
        raise PtxError("two threads store to one address in one instruction")
    sh = np.arange(size, dtype=np.uint64) * np.uint64(8)
    a8[off[:, None] + np.arange(size)] = ((v[:, None] >> sh) & np.uint64(0xFF)).astype(np.uint8)


class Block:
    def __init__(self, kernel, mem, params, bid, grid, ntid):
        self.k, self.mem, self.bid, self.grid, self.n = kernel, mem, bid, grid, ntid
        self.params = dict(zip(kernel.params, params))
        self.regs = {}
        self.shared = np.zeros(max(kernel.shared_bytes, 8), np.uint8)
        self.tid = np.arange(ntid, dtype=np.uint64)

    def reg(self, name, idx):
        if name not in self.regs:
            self.regs[name] = np.zeros(self.n, np.uint64)
        return self.regs[name][idx]

    def val(self, s, idx, w):
        if s.startswith("%"):
            sp = {"%tid.x": self.tid, "%ntid.x": np.full(self.n, self.n, np.uint64),
                  "%ctaid.x": np.full(self.n, self.bid, np.uint64), "%nctaid.x": np.full(self.n, self.grid, np.uint64),
                  "%laneid": self.tid & np.uint64(31),
                  "%lanemask_lt": (np.uint64(1) << (self.tid & np.uint64(31))) - np.uint64(1)}.get(s)
            if sp is not None:
                return sp[idx]
            return self.reg(s, idx)
        if s in self.k.shared:
            return np.full(len(idx), self.k.shared[s], np.uint64)
        v = int(s, 0)
        return np.full(len(idx), v & ((1 << w) - 1) if w > 1 else v, np.uint64)

    def set(self, name, idx, v, w):
        if name not in self.regs:
            self.regs[name] = np.zeros(self.n, np.uint64)
        self.regs[name][idx] = v.astype(np.uint64) & _mask(w) if w > 1 else v.astype(bool).astype(np.uint64)

    def addr(self, s, idx):
        m = re.match(r"\[\s*([%\w.]+)\s*(?:\+\s*(-?\w+))?\s*\]", s)
        base = self.val(m.group(1), idx, 64)
        return base + np.uint64(int(m.group(2), 0)) if m.group(2) else base

    def whole_warps(self, idx):
        if len(idx) % 32 or (idx.reshape(-1, 32) != idx.reshape(-1, 32)[:, :1] + np.arange(32)).any() or (idx[::32] % 32).any():
            raise PtxError("a warp collective without its whole warp")


def _cmp(op, a, b):
    return {"eq": a == b, "ne": a != b, "lt": a < b, "le": a <= b, "gt": a > b, "ge": a >= b,
            "lo": a < b, "ls": a <= b, "hi": a > b, "hs": a >= b}[op]


def run_kernel(kernel, mem, params, grid, block, max_steps=50_000_000):
    for bid in range(grid):
        _run_block(Block(kernel, mem, params, bid, grid, block), max_steps)


def _run_block(B, max_steps):
    n, code = B.n, B.k.code
    pc = np.zeros(n, np.int64)
    done = np.zeros(n, bool)
    waiting = np.zeros(n, bool)
    steps = 0
    while True:
        run = ~done & ~waiting
        if not run.any():
            if waiting.any():
                waiting[:] = False
                continue
            return
        m = pc[run].min()
        idx = np.nonzero(run & (pc == m))[0]
        steps += 1
        if steps > max_steps:
            raise PtxError(f"{B.k.name}: no end after {max_steps} steps")
        if m >= len(code):
            raise PtxError(f"{B.k.name}: ran off the end")
        pred, neg, op, ops, text = code[m]
        act = idx
        if pred is not None:
            g = B.reg(pred, idx).astype(bool)
            act = idx[~g] if neg else idx[g]
        try:
            nxt = _exec(B, op, ops, act, idx, done, waiting)
        except PtxError as e:
            raise PtxError(f"{B.k.name} block {B.bid}, `{text}`: {e}") from None
        if nxt is None:
            pc[idx] += 1
        else:
            pc[idx] += 1
            pc[act] = B.k.labels[nxt]


def _exec(B, op, ops, act, idx, done, waiting):
    name = op[0]
    if name == "bra":
        return ops[0]
    if name == "ret":
        done[act] = True
        return None
    if name == "bar":
        if op[1] == "sync":
            waiting[act] = True
        else:  # bar.warp.sync
            B.whole_warps(act)
        return None
    if len(act) == 0:
        return None
    t = op[-1]
    w = _WIDTH.get(t, 64)
    if name in ("add", "sub", "mul", "mad", "div", "rem", "min", "max", "and", "or", "xor"):
        if t == "pred":
            a, b = B.val(ops[1], act, 1).astype(bool), B.val(ops[2], act, 1).astype(bool)
            B.set(ops[0], act, {"and": a & b, "or": a | b, "xor": a ^ b}[name], 1)
            return None
        a, b = B.val(ops[1], act, w), B.val(ops[2], act, w)
        if name == "mul" and op[1] == "wide":
            B.set(ops[0], act, (a & _mask(32)) * (b & _mask(32)), 64)
            return None
        if name in ("div", "rem") and (b == 0).any():
            raise PtxError("division by zero")
        signed = t.startswith("s")
        if signed and name in ("div", "rem", "min", "max"):
            sa, sb = _signed(a, w), _signed(b, w)
            r = {"div": lambda: np.trunc(sa / sb).astype(np.int64), "rem": lambda: np.fmod(sa, sb),
                 "min": lambda: np.minimum(sa, sb), "max": lambda: np.maximum(sa, sb)}[name]()
            B.set(ops[0], act, r.astype(np.int64).view(np.uint64), w)
            return None
        r = {"add": lambda: a + b, "sub": lambda: a - b, "mul": lambda: a * b,
             "mad": lambda: a * b + B.val(ops[3], act, w), "div": lambda: a // b, "rem": lambda: a % b,
             "min": lambda: np.minimum(a, b), "max": lambda: np.maximum(a, b), "and": lambda: a & b,
             "or": lambda: a | b, "xor": lambda: a ^ b}[name]()
        B.set(ops[0], act, r, w)
        return None
    if name == "not":
        if t == "pred":
            B.set(ops[0], act, ~B.val(ops[1], act, 1).astype(bool), 1)
        else:
            B.set(ops[0], act, ~B.val(ops[1], act, w), w)
        return None
    if name in ("shl", "shr"):
        a, b = B.val(ops[1], act, w), B.val(ops[2], act, 32)
        big = b >= np.uint64(w)
        bs = np.minimum(b, np.uint64(w - 1))
        if name == "shl":
            r = np.where(big, np.uint64(0), a << bs)
        elif t.startswith("s"):
            r = (_signed(a, w) >> bs.astype(np.int64)).view(np.uint64)
            r = np.where(big, np.where(_signed(a, w) < 0, _mask(w), np.uint64(0)), r)
        else:
            r = np.where(big, np.uint64(0), a >> bs)
        B.set(ops[0], act, r, w)
        return None
    if name == "setp":
        cmp, boolop = op[1], op[2] if len(op) == 4 else None
        a, b = B.val(ops[1], act, w), B.val(ops[2], act, w)
        if t.startswith("s"):
            a, b = _signed(a, w), _signed(b, w)
        r = _cmp(cmp, a, b)
        if boolop:
            c = B.val(ops[3], act, 1).astype(bool)
            r = {"and": r & c, "or": r | c, "xor": r ^ c}[boolop]
        B.set(ops[0], act, r, 1)
        return None
    if name == "selp":
        a, b, p = B.val(ops[1], act, w), B.val(ops[2], act, w), B.val(ops[3], act, 1).astype(bool)
        B.set(ops[0], act, np.where(p, a, b), w)
        return None
    if name == "mov":
        B.set(ops[0], act, B.val(ops[1], act, w), w)
        return None
    if name == "cvt" or name == "cvta":
        if name == "cvta":
            B.set(ops[0], act, B.val(ops[1], act, 64), 64)
            return None
        dt, st = op[1], op[2]
        v = B.val(ops[1], act, _WIDTH[st])
        if st.startswith("s") and _WIDTH[dt] > _WIDTH[st]:
            v = _signed(v, _WIDTH[st]).view(np.uint64)
        B.set(ops[0], act, v, _WIDTH[dt])
        return None
    if name == "clz":  # leading zeros: w minus the position of the highest set bit, plus one
        v = B.val(ops[1], act, w)
        n = np.full(len(v), w, np.uint64)
        for b in range(w):
            n = np.where((v >> np.uint64(b)) & np.uint64(1), np.uint64(w - 1 - b), n)
        B.set(ops[0], act, n, 32)
        return None
    if name == "popc":
        B.set(ops[0], act, np.bitwise_count(B.val(ops[1], act, w)).astype(np.uint64), 32)
        return None
    if name == "atom":  # atom.space.add.u32 d, [a], b: each thread's old value, in thread order
        size = _WIDTH[t] // 8
        a = B.addr(ops[1], act)
        v = B.val(ops[2], act, w)
        if op[1] == "shared":
            places = [(B.shared, np.arange(len(act)), a.astype(np.int64))]
        else:
            places = B.mem.locate(a, size)
        old = np.zeros(len(act), np.uint64)
        for a8, sel, off in places:
            for k in range(len(sel)):
                cur = _load(a8, off[k:k + 1], size)
                old[sel[k]] = cur[0]
                if op[2] != "add":
                    raise PtxError(f"no atomic {op[2]}")
                _store(a8, off[k:k + 1], size, (cur + v[sel[k]:sel[k] + 1]) & _mask(w))
        B.set(ops[0], act, old, w)
        return None
    if name in ("ld", "st", "red"):
        space = op[1]
        size = max(_WIDTH[t] // 8, 1)
        if name == "ld" and space == "param":
            pname = ops[1].strip("[] ")
            B.set(ops[0], act, np.full(len(act), B.params[pname], np.uint64), 64)
            return None
        a = B.addr(ops[1] if name == "ld" else ops[0], act)
        if space == "shared":
            off = a.astype(np.int64)
            if (off + size > B.shared.size).any() or (off < 0).any():
                raise PtxError(f"shared access out of bounds: {int(off.max())} of {B.shared.size}")
            places = [(B.shared, np.arange(len(act)), off)]
        elif space == "global":
            places = B.mem.locate(a, size)
        else:
            raise PtxError(f"no {space} memory")
        if name == "ld":
            v = np.zeros(len(act), np.uint64)
            for a8, sel, off in places:
                v[sel] = _load(a8, off, size)
            B.set(ops[0], act, v, max(w, 32) if _WIDTH[t] < 32 else w)
            return None
        v = B.val(ops[1], act, w)
        for a8, sel, off in places:
            if name == "st":
                _store(a8, off, size, v[sel])
                continue
            uo, inv = np.unique(off, return_inverse=True)
            vs = v[sel]
            cur = _load(a8, uo, size)
            if op[2] == "add":
                add = np.zeros(len(uo), np.uint64)
                np.add.at(add, inv, vs)
                cur = (cur + add) & _mask(w)
            elif op[2] == "or":
                for j in range(len(uo)):
                    cur[j] |= np.bitwise_or.reduce(vs[inv == j])
            else:
                raise PtxError(f"no reduction {op[2]}")
            _store(a8, uo, size, cur)
        return None
    if name == "match":  # match.any.sync.b32 d, a, mask
        B.whole_warps(act)
        a = B.val(ops[1], act, 32).reshape(-1, 32)
        eq = a[:, :, None] == a[:, None, :]
        bits = (eq * (np.uint64(1) << np.arange(32, dtype=np.uint64))).sum(axis=2, dtype=np.uint64)
        B.set(ops[0], act, bits.reshape(-1), 32)
        return None
    if name == "vote":  # vote.sync.ballot.b32 d, p, mask
        B.whole_warps(act)
        p = B.val(ops[1], act, 1).astype(bool).reshape(-1, 32)
        bits = (p * (np.uint64(1) << np.arange(32, dtype=np.uint64))).sum(axis=1, dtype=np.uint64)
        B.set(ops[0], act, np.repeat(bits, 32), 32)
        return None
    if name == "shfl" and op[2] == "idx":  # shfl.sync.idx.b32 d, a, lane, 31, mask (whole warps)
        B.whole_warps(act)
        a = B.val(ops[1], act, 32).reshape(-1, 32)
        src = B.val(ops[2], act, 32).reshape(-1, 32).astype(np.int64) & 31
        B.set(ops[0].split("|")[0], act, np.take_along_axis(a, src, axis=1).reshape(-1), 32)
        return None
    if name == "shfl":  # shfl.sync.up.b32 d|p, a, b, c, mask
        B.whole_warps(act)
        if op[2] != "up":
            raise PtxError(f"no shfl mode {op[2]}")
        d, p = ops[0].split("|")
        a = B.val(ops[1], act, 32).reshape(-1, 32)
        delta = int(ops[2], 0)
        lane = np.arange(32)
        src = lane - delta
        ok = src >= 0
        r = np.where(ok, a[:, np.clip(src, 0, 31)], a)
        B.set(d, act, r.reshape(-1), 32)
        B.set(p, act, np.tile(ok, len(act) // 32), 1)
        return None
    raise PtxError(f"the interpreter has no {'.'.join(op)}")
