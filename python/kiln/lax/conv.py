"""Convolutions and window reductions, as jax.lax defines them (issue 13).

conv_general_dilated binds the conv family's primitives (ir/prims/conv.c): `conv_general_dilated`
forward, and the gradients `conv_bwd_data` (with respect to the input: the transposed
convolution) and `conv_bwd_filter` (with respect to the kernel), each one library call (cuDNN on
the GPU, im2col + BLAS on the CPU, runtime/hostconv.c), and each the transpose of another, so
every derivative of every order stays one call. The primitives take one layout, channels last:
input (N, S..., C), kernel (O, K..., I), output (N, S'..., O). Channels last because cuDNN runs
it fastest (its tensor-core kernels are NHWC-native; NCHW gets transposed inside cuDNN), and on
the CPU an output position's patch is then contiguous runs of channels, the GEMM's rows. Any
dimension_numbers map to it by transposes around the call, which kiln's simplifier cancels or
fuses with their neighbours.

What the primitives do not cover goes through the composition this module had before, built
from pad, strided slices (one per window offset) and dot_general, unchanged: batch_group_count
> 1, integer and complex dtypes, negative padding, an lhs_dilation that is not a transposed
convolution of the primitives' form (window strides 1, padding at most the dilated kernel), and
everything when KILN_CONV_PRIM=0 (an A/B switch). KILN_LOG_COMPILES=1 says which way each
convolution went.

conv_general_dilated, conv, conv_with_general_padding, conv_transpose, conv_dimension_numbers,
ConvDimensionNumbers, padtype_to_pads, reduce_window."""

import builtins
import collections
import operator

import numpy as np

from kiln._src import core, dtypes

import os
import sys

_IM2COL = os.environ.get("KILN_CONV_IM2COL", "1") != "0"
_PRIM = os.environ.get("KILN_CONV_PRIM", "1") != "0"  # the conv primitives (0: the composition always)
# patches larger than this: one product per kernel offset instead (KILN_CONV_IM2COL_MAX_MB)
_IM2COL_MAX_BYTES = int(float(os.environ.get("KILN_CONV_IM2COL_MAX_MB", "1024")) * (1 << 20))

ConvDimensionNumbers = collections.namedtuple("ConvDimensionNumbers", ["lhs_spec", "rhs_spec", "out_spec"])


def _lax():
    from kiln import lax
    return lax


def padtype_to_pads(in_shape, window_shape, window_strides, padding):
    """[(low, high)] per spatial dimension for 'SAME', 'SAME_LOWER' or 'VALID' (XLA's rule)."""
    if not isinstance(padding, str):
        return [tuple(p) for p in padding]
    mode = padding.upper()
    if mode == "VALID":
        return [(0, 0)] * len(in_shape)
    if mode not in ("SAME", "SAME_LOWER"):
        raise ValueError(f"padding must be 'SAME', 'SAME_LOWER', 'VALID' or a sequence of (low, high) pairs, "
                         f"got {padding!r}")
    pads = []
    for n, k, s in zip(in_shape, window_shape, window_strides):
        out = -(-n // s)
        total = builtins.max((out - 1) * s + k - n, 0)
        lo = total // 2 if mode == "SAME" else -(-total // 2)
        pads.append((lo, total - lo))
    return pads


def conv_dimension_numbers(lhs_shape, rhs_shape, dimension_numbers):
    """ConvDimensionNumbers (lhs_spec, rhs_spec, out_spec) of ints: lhs (batch, feature, spatial...),
    rhs (out feature, in feature, spatial...), out (batch, feature, spatial...); spatial
    dimensions in the kernel spec's order, as JAX pairs them by letter."""
    nd = len(lhs_shape)
    if len(rhs_shape) != nd:
        raise TypeError(f"conv: lhs and rhs must have the same rank, got {len(lhs_shape)} and {len(rhs_shape)}")
    if dimension_numbers is None:
        iota = tuple(range(nd))
        return ConvDimensionNumbers(iota, iota, iota)
    if isinstance(dimension_numbers, ConvDimensionNumbers):
        return dimension_numbers
    if len(dimension_numbers) != 3:
        raise TypeError(f"conv: dimension_numbers must be None, a ConvDimensionNumbers or three strings, got "
                        f"{dimension_numbers!r}")
    lhs, rhs, out = dimension_numbers
    if not all(isinstance(s, str) for s in dimension_numbers):
        return ConvDimensionNumbers(tuple(lhs), tuple(rhs), tuple(out))
    for spec, need in ((lhs, "NC"), (rhs, "OI"), (out, "NC")):
        if len(spec) != nd or any(c not in spec for c in need) or len(set(spec)) != nd:
            raise TypeError(f"conv: dimension spec {spec!r} must name each of the {nd} dimensions once, with "
                            f"{need[0]!r} and {need[1]!r}")
    spatial = [c for c in rhs if c not in "OI"]
    if sorted(c for c in lhs if c not in "NC") != sorted(spatial) or \
            sorted(c for c in out if c not in "NC") != sorted(spatial):
        raise TypeError(f"conv: the spatial letters of {dimension_numbers!r} do not match")
    return ConvDimensionNumbers((lhs.index("N"), lhs.index("C")) + tuple(lhs.index(c) for c in spatial),
                                (rhs.index("O"), rhs.index("I")) + tuple(rhs.index(c) for c in spatial),
                                (out.index("N"), out.index("C")) + tuple(out.index(c) for c in spatial))


def _ints(v, n, what, default=1):
    if v is None:
        return (default,) * n
    v = tuple(operator.index(x) for x in v)
    if len(v) != n:
        raise ValueError(f"conv: {what} needs {n} entries (one per spatial dimension), got {len(v)}")
    return v


def _conv_nsc(x, w, strides, pads, lhs_dil, rhs_dil, precision, pet):
    """x (N, S..., C), w (O, C, K...) -> (N, S'..., O): no groups. Channels last, so that the
    products contract each input position's contiguous channels."""
    lax = _lax()
    nd = x.ndim - 2
    cfg = [(0, 0, 0)] + [(lo, hi, d - 1) for (lo, hi), d in zip(pads, lhs_dil)] + [(0, 0, 0)]
    if any(c != (0, 0, 0) for c in cfg):
        x = lax.pad(x, core.asarray(np.zeros((), x.dtype)), cfg)
    ksz = w.shape[2:]
    out = [(x.shape[1 + i] - ((ksz[i] - 1) * rhs_dil[i] + 1)) // strides[i] + 1 for i in range(nd)]
    if any(o <= 0 for o in out):
        raise ValueError(f"conv: the padded input {x.shape[1:-1]} is smaller than the dilated kernel {ksz}")

    def patch(k):  # the input positions kernel offset k meets: (N, S'..., C)
        start = [0] + [k[i] * rhs_dil[i] for i in range(nd)] + [0]
        limit = [x.shape[0]] + [start[1 + i] + (out[i] - 1) * strides[i] + 1 for i in range(nd)] + [x.shape[-1]]
        return lax.slice(x, start, limit, [1] + list(strides) + [1])

    kcount = int(np.prod(ksz))
    patch_bytes = x.shape[0] * x.shape[-1] * int(np.prod(out)) * kcount * np.dtype(x.dtype.name).itemsize
    im2col = kcount > 1 and _IM2COL and patch_bytes <= _IM2COL_MAX_BYTES
    if os.environ.get("KILN_LOG_COMPILES", "0") != "0":  # which way it was built, as the compilers say theirs
        print(f"kiln: conv of the padded {x.dtype.name}{list(x.shape)} input (channels last) by a {list(w.shape)} kernel: "
              + (f"im2col, one product over {kcount} offsets ({patch_bytes / 2**20:.1f} MiB of patches)" if im2col
                 else f"one product per kernel offset ({kcount})"), file=sys.stderr)
    if im2col:
        # one product over every kernel offset at once: the patches (N, S'..., K, C) against the
        # kernel as (K, C, O), a better-shaped GEMM than K thin ones, for K copies of the input
        patches = lax.concatenate([lax.expand_dims(patch(k), (nd + 1,)) for k in np.ndindex(*ksz)], nd + 1)
        wk = lax.transpose(lax.reshape(w, (w.shape[0], w.shape[1], kcount)), (2, 1, 0))
        return lax.dot_general(patches, wk, (([nd + 1, nd + 2], [0, 1]), ([], [])), precision=precision,
                               preferred_element_type=pet)
    acc = None
    for k in np.ndindex(*ksz):
        wk = lax.transpose(w[(builtins.slice(None), builtins.slice(None)) + tuple(k)], (1, 0))  # (C, O)
        term = lax.dot_general(patch(k), wk, (([nd + 1], [0]), ([], [])), precision=precision,
                               preferred_element_type=pet)
        acc = term if acc is None else lax.add(acc, term)
    return acc


def _log(msg):
    if os.environ.get("KILN_LOG_COMPILES", "0") != "0":
        print("kiln: " + msg, file=sys.stderr)


_PRIM_DTYPES = ("float16", "bfloat16", "float32", "float64")


def _conv_prim(lhs, rhs, dn, nd, strides, pads, lhs_dil, rhs_dil, G, B, precision, pet):
    """conv_general_dilated as one of the conv primitives, in their channels-last layout, or None
    when they do not cover the call (the caller composes it then)."""
    lax = _lax()
    why = None
    if not _PRIM:
        why = "KILN_CONV_PRIM=0"
    elif B != 1:
        why = f"batch_group_count {B}"
    elif lhs.dtype.name not in _PRIM_DTYPES:
        why = f"dtype {lhs.dtype.name}"
    elif nd > 3:
        why = f"{nd} spatial dimensions"
    elif any(lo < 0 or hi < 0 for lo, hi in pads):
        why = f"negative padding {pads}"
    elif pet is not None and np.dtype(pet).name not in _PRIM_DTYPES:
        why = f"preferred_element_type {np.dtype(pet).name}"
    transposed = any(d > 1 for d in lhs_dil)
    lspec, rspec, ospec = dn
    ksz = [rhs.shape[i] for i in rspec[2:]]
    eff_k = [(k - 1) * d + 1 for k, d in zip(ksz, rhs_dil)]
    if why is None and transposed:
        # lhs dilated by s, padded (plo, phi), stride 1: the input gradient of a convolution with
        # window strides s, padding eff_k - 1 - (plo, phi), and the kernel flipped with its
        # features swapped (conv_transpose's case)
        if any(st != 1 for st in strides):
            why = f"lhs_dilation {tuple(lhs_dil)} with window_strides {tuple(strides)}"
        elif any(lo > e - 1 or hi > e - 1 for (lo, hi), e in zip(pads, eff_k)):
            why = f"lhs_dilation with padding {pads} beyond the dilated kernel {tuple(eff_k)}"
    sx = [lhs.shape[i] for i in lspec[2:]]
    if transposed:
        out = [(n - 1) * s + 1 + lo + hi - e + 1 for n, s, (lo, hi), e in zip(sx, lhs_dil, pads, eff_k)]
    else:
        out = [(n + lo + hi - e) // s + 1 if n + lo + hi >= e else 0 for n, s, (lo, hi), e in zip(sx, strides, pads, eff_k)]
    if why is None and builtins.min(out) < 1:
        why = "an empty output"
    if why is not None:
        _log(f"conv_general_dilated of {lhs.dtype.name}{list(lhs.shape)} by {list(rhs.shape)}: composed ({why})")
        return None
    from kiln.lax import _precision_code
    from kiln._src.core import bind1
    from kiln._src import dtypes
    x = lax.transpose(lhs, (lspec[0],) + tuple(lspec[2:]) + (lspec[1],))  # (N, S..., C)
    w = lax.transpose(rhs, (rspec[0],) + tuple(rspec[2:]) + (rspec[1],))  # (O, K..., I)
    params = {"rhs_dilation": tuple(rhs_dil), "feature_group_count": G, "precision": _precision_code(precision)}
    if pet is not None and np.dtype(pet) != np.dtype(lhs.dtype.name):
        params["preferred_element_type"] = dtypes.canonicalize_dtype(pet).name
    if not transposed:
        params.update(window_strides=tuple(strides), padding_lo=tuple(p[0] for p in pads),
                      padding_hi=tuple(p[1] for p in pads), spatial_shape=())
        y = bind1("conv_general_dilated", [x, w], params)
        how = "conv_general_dilated"
    else:
        O, I = w.shape[0], w.shape[-1]
        og = O // G
        # w' (C, K..., O / G): group g's [i, k, o] = w[g * og + o, flipped k, i]
        wt = lax.reshape(w, (G, og) + tuple(ksz) + (I,))
        wt = lax.transpose(wt, (0, nd + 2) + tuple(range(2, nd + 2)) + (1,))
        wt = lax.rev(lax.reshape(wt, (G * I,) + tuple(ksz) + (og,)), tuple(range(1, nd + 1)))
        params.update(window_strides=tuple(lhs_dil), padding_lo=tuple(e - 1 - p[0] for p, e in zip(pads, eff_k)),
                      padding_hi=tuple(e - 1 - p[1] for p, e in zip(pads, eff_k)), spatial_shape=tuple(out))
        y = bind1("conv_bwd_data", [x, wt], params)
        how = "conv_bwd_data (a transposed convolution)"
    _log(f"conv_general_dilated of {lhs.dtype.name}{list(lhs.shape)} by {list(rhs.shape)}: the {how} primitive")
    # y is (N, S'..., O): canonical dimension c (batch, feature, spatial...) sits at where[c]
    where = [0, nd + 1] + list(range(1, nd + 1))
    perm = [0] * (nd + 2)
    for canon, at in enumerate(ospec):
        perm[at] = where[canon]
    return lax.transpose(y, tuple(perm))


def _check_preferred_element_type(dt, pet):
    """JAX's check of a convolution's preferred_element_type (stricter than dot_general's): integers may
    widen to integers or floats, floats to floats, complex to complex, never narrower (issue 32: a float
    convolution with an int type, or a complex one with a float type, computed where JAX refuses)."""
    kinds = {"i": "integral", "u": "integral", "f": "floating", "c": "complex"}
    kind = lambda d: "f" if d == dtypes.bfloat16 else d.kind  # noqa: E731
    if not (kind(dt) in "iu" and kind(pet) == "f"):
        if kinds.get(kind(dt)) != kinds.get(kind(pet)):
            raise TypeError("conv_general_dilated: input type is incompatible with `preferred_element_type`: "
                            f"{dt.name} and {pet.name}; the compatible combinations are (integral, integral), "
                            "(integral, floating), (floating, floating), (complex, complex)")
        if kind(dt) == "i" and kind(pet) != "i":
            raise TypeError(f"conv_general_dilated: `preferred_element_type` {pet.name} must have the same "
                            f"signedness as the input type {dt.name}")
    if pet.itemsize < dt.itemsize:
        raise TypeError(f"conv_general_dilated: `preferred_element_type` {pet.name} must not be narrower than the "
                        f"input type {dt.name}")


def conv_general_dilated(lhs, rhs, window_strides, padding, lhs_dilation=None, rhs_dilation=None,
                         dimension_numbers=None, feature_group_count=1, batch_group_count=1, precision=None,
                         preferred_element_type=None):
    """XLA's ConvGeneralDilated, as jax.lax.conv_general_dilated."""
    lax = _lax()
    lhs, rhs = core.asarray(lhs), core.asarray(rhs)
    dn = conv_dimension_numbers(lhs.shape, rhs.shape, dimension_numbers)
    nd = lhs.ndim - 2
    if nd < 1:
        raise TypeError(f"conv_general_dilated: operands need a spatial dimension, got lhs of shape {lhs.shape}")
    strides = _ints(window_strides, nd, "window_strides")
    lhs_dil, rhs_dil = _ints(lhs_dilation, nd, "lhs_dilation"), _ints(rhs_dilation, nd, "rhs_dilation")
    G, B = operator.index(feature_group_count), operator.index(batch_group_count)
    if G < 1 or B < 1 or (G > 1 and B > 1):
        raise ValueError(f"conv_general_dilated: feature_group_count ({G}) and batch_group_count ({B}) must be "
                         "positive and at most one of them above 1")
    lax._check_same_dtypes("conv_general_dilated", [lhs, rhs])  # as JAX, even with a preferred type
    if preferred_element_type is not None:
        _check_preferred_element_type(np.dtype(lhs.dtype), np.dtype(preferred_element_type))
    x = lax.transpose(lhs, (dn.lhs_spec[0],) + tuple(dn.lhs_spec[2:]) + (dn.lhs_spec[1],))  # (N, S..., C)
    w = lax.transpose(rhs, dn.rhs_spec)  # (O, I, K...)
    N, C = x.shape[0], x.shape[-1]
    O, I = w.shape[:2]
    if C != I * G:
        raise TypeError(f"conv_general_dilated: lhs feature dimension ({C}) must equal the rhs input feature "
                        f"dimension ({I}) times feature_group_count ({G})")
    if O % (G * B):
        raise TypeError(f"conv_general_dilated: rhs output feature dimension ({O}) must be a multiple of "
                        f"feature_group_count * batch_group_count ({G * B})")
    if N % B:
        raise TypeError(f"conv_general_dilated: lhs batch ({N}) must be a multiple of batch_group_count ({B})")
    if isinstance(padding, str) and any(d > 1 for d in lhs_dil):
        raise ValueError("conv_general_dilated: string padding is not supported with lhs_dilation (a transposed "
                         "convolution), as in JAX: give (low, high) pairs, or use conv_transpose")
    if isinstance(padding, str):
        dil_in = [(x.shape[1 + i] - 1) * lhs_dil[i] + 1 for i in range(nd)]
        eff_k = [(w.shape[2 + i] - 1) * rhs_dil[i] + 1 for i in range(nd)]
        pads = padtype_to_pads(dil_in, eff_k, strides, padding)
    else:
        pads = [tuple(operator.index(v) for v in p) for p in padding]
        if len(pads) != nd or any(len(p) != 2 for p in pads):
            raise ValueError(f"conv_general_dilated: padding needs {nd} (low, high) pairs, got {padding!r}")
    y = _conv_prim(lhs, rhs, dn, nd, strides, pads, lhs_dil, rhs_dil, G, B, precision, preferred_element_type)
    if y is not None:
        return y
    args = (strides, pads, lhs_dil, rhs_dil, precision, preferred_element_type)
    if G > 1:
        og = O // G
        outs = [_conv_nsc(x[..., g * I:(g + 1) * I], w[g * og:(g + 1) * og], *args) for g in range(G)]
        y = lax.concatenate(outs, nd + 1)
    elif B > 1:
        nb, ob = N // B, O // B
        outs = [_conv_nsc(x[g * nb:(g + 1) * nb], w[g * ob:(g + 1) * ob], *args) for g in range(B)]
        y = lax.concatenate(outs, nd + 1)
    else:
        y = _conv_nsc(x, w, *args)
    # y is (N, S'..., O): canonical dimension c (batch, feature, spatial...) sits at where[c]
    where = [0, nd + 1] + list(range(1, nd + 1))
    perm = [0] * (nd + 2)
    for canon, at in enumerate(dn.out_spec):
        perm[at] = where[canon]
    return lax.transpose(y, tuple(perm))


def conv_general_dilated_patches(lhs, filter_shape, window_strides, padding, lhs_dilation=None, rhs_dilation=None,
                                 dimension_numbers=None, precision=None, preferred_element_type=None):
    """The patches conv_general_dilated would multiply (jax.lax.conv_general_dilated_patches):
    C * prod(filter_shape) output features, ordered (channel, then filter offsets), in the
    output layout; a convolution with a one-hot kernel, as JAX computes it."""
    lax = _lax()
    lhs = core.asarray(lhs)
    nd = lhs.ndim - 2
    filter_shape = tuple(operator.index(k) for k in filter_shape)
    if len(filter_shape) != nd:
        raise ValueError(f"conv_general_dilated_patches: filter_shape needs {nd} entries, got {filter_shape}")
    dn = conv_dimension_numbers(lhs.shape, (1, 1) + filter_shape, dimension_numbers)
    c = lhs.shape[dn.lhs_spec[1]]
    k = int(np.prod(filter_shape))
    eye = np.eye(c * k, dtype=lhs.dtype.name).reshape((c * k, c) + filter_shape)  # (O = c*k, I = c, K...)
    canon = ConvDimensionNumbers(dn.lhs_spec, tuple(range(nd + 2)), dn.out_spec)
    return conv_general_dilated(lhs, core.asarray(eye), window_strides, padding, lhs_dilation, rhs_dilation, canon,
                                precision=precision or "highest", preferred_element_type=preferred_element_type)


def conv(lhs, rhs, window_strides, padding, precision=None, preferred_element_type=None):
    """NCHW input, OIHW kernel."""
    return conv_general_dilated(lhs, rhs, window_strides, padding, precision=precision,
                                preferred_element_type=preferred_element_type)


def conv_with_general_padding(lhs, rhs, window_strides, padding, lhs_dilation, rhs_dilation, precision=None,
                              preferred_element_type=None):
    return conv_general_dilated(lhs, rhs, window_strides, padding, lhs_dilation=lhs_dilation,
                                rhs_dilation=rhs_dilation, precision=precision,
                                preferred_element_type=preferred_element_type)


def _conv_transpose_padding(k, s, padding):
    if padding == "SAME":
        pad_len = k + s - 2
        pad_a = k - 1 if s > k - 1 else -(-pad_len // 2)
    elif padding == "VALID":
        pad_len = k + s - 2 + builtins.max(k - s, 0)
        pad_a = k - 1
    else:
        raise ValueError(f"conv_transpose: padding must be 'SAME', 'VALID' or (low, high) pairs, got {padding!r}")
    return pad_a, pad_len - pad_a


def conv_transpose(lhs, rhs, strides, padding, rhs_dilation=None, dimension_numbers=None, transpose_kernel=False,
                   precision=None, preferred_element_type=None):
    """The gradient of a strided convolution as a convolution of its own (jax.lax.conv_transpose):
    the input dilated by the strides; transpose_kernel flips the kernel's spatial axes and swaps
    its input and output features."""
    lax = _lax()
    lhs, rhs = core.asarray(lhs), core.asarray(rhs)
    nd = lhs.ndim - 2
    if dimension_numbers is None:
        dimension_numbers = {1: ("NHC", "HIO", "NHC"), 2: ("NHWC", "HWIO", "NHWC"),
                             3: ("NHWDC", "HWDIO", "NHWDC")}.get(nd)
        if dimension_numbers is None:
            raise ValueError("conv_transpose: give dimension_numbers for more than 3 spatial dimensions")
    dn = conv_dimension_numbers(lhs.shape, rhs.shape, dimension_numbers)
    k_sdims = [rhs.shape[i] for i in dn.rhs_spec[2:]]
    rhs_dil = _ints(rhs_dilation, nd, "rhs_dilation")
    eff_k = [(k - 1) * d + 1 for k, d in zip(k_sdims, rhs_dil)]
    strides = _ints(strides, nd, "strides")
    if isinstance(padding, str):
        pads = [_conv_transpose_padding(k, s, padding.upper()) for k, s in zip(eff_k, strides)]
    else:
        pads = padding
    if transpose_kernel:
        rhs = lax.rev(rhs, dn.rhs_spec[2:])
        spec = list(dn.rhs_spec)
        spec[0], spec[1] = spec[1], spec[0]
        dn = ConvDimensionNumbers(dn.lhs_spec, tuple(spec), dn.out_spec)
    return conv_general_dilated(lhs, rhs, (1,) * nd, pads, lhs_dilation=strides, rhs_dilation=rhs_dil,
                                dimension_numbers=dn, precision=precision,
                                preferred_element_type=preferred_element_type)


def reduce_window(operand, init_value, computation, window_dimensions, window_strides, padding, base_dilation=None,
                  window_dilation=None):
    """computation folded over each window (XLA's ReduceWindow): operand padded (and dilated) with
    init_value, one strided slice per window offset, combined elementwise from init_value on;
    `lax.max` gives max pooling, `lax.add` sum pooling. Differentiable and batchable through those."""
    lax = _lax()
    if not isinstance(operand, core.Array) and not hasattr(operand, "shape"):
        raise NotImplementedError("reduce_window: kiln takes one operand array (not a pytree of them) for now")
    x = core.asarray(operand)
    n = x.ndim
    win = _ints(window_dimensions, n, "window_dimensions")
    strides = _ints(window_strides, n, "window_strides")
    base, wdil = _ints(base_dilation, n, "base_dilation"), _ints(window_dilation, n, "window_dilation")
    init = core.asarray(init_value).astype(x.dtype)
    if init.shape != ():
        raise TypeError(f"reduce_window: init_value must be a scalar, got shape {init.shape}")
    if isinstance(padding, str):
        pads = padtype_to_pads([(d - 1) * b + 1 for d, b in zip(x.shape, base)],
                               [(k - 1) * d + 1 for k, d in zip(win, wdil)], strides, padding)
    else:
        pads = [tuple(operator.index(v) for v in p) for p in padding]
        if len(pads) != n:
            raise ValueError(f"reduce_window: padding needs {n} (low, high) pairs, got {padding!r}")
    cfg = [(lo, hi, b - 1) for (lo, hi), b in zip(pads, base)]
    if any(c != (0, 0, 0) for c in cfg):
        x = lax.pad(x, init, cfg)
    out = [(x.shape[i] - ((win[i] - 1) * wdil[i] + 1)) // strides[i] + 1 for i in range(n)]
    if any(o < 0 for o in out):
        raise ValueError(f"reduce_window: the window {win} does not fit the padded operand {x.shape}")
    acc = lax.broadcast_in_dim(init, tuple(builtins.max(o, 0) for o in out), ())
    combine = _chooser(lax, computation) or computation
    for k in np.ndindex(*win):
        start = [k[i] * wdil[i] for i in range(n)]
        limit = [start[i] + builtins.max(out[i] - 1, 0) * strides[i] + (1 if out[i] > 0 else 0) for i in range(n)]
        acc = combine(acc, lax.slice(x, start, limit, strides))
    return acc


def _chooser(lax, computation):
    """max/min as a choice of one operand: the window's first extremum keeps the whole gradient (JAX's
    max pooling gradient) where lax.max would split it between ties; a NaN wins, as in lax.max."""
    if computation not in (lax.max, lax.min):
        return None
    better = lax.gt if computation is lax.max else lax.lt

    def choose(acc, v):
        if v.dtype.kind not in "fc":
            return computation(acc, v)
        take = lax.or_(better(v, acc), lax.and_(lax.ne(v, v), lax.eq(acc, acc)))
        return lax.select(take, v, acc)
    return choose
