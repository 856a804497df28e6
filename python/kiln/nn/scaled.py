"""jax.nn's block-scaled matmuls (scaled_matmul, scaled_dot_general, get_scaled_dot_general_config).

JAX runs these only through cuDNN on Blackwell GPUs with float8/float4 operands. kiln has no
float8/float4 dtypes, so scaled_matmul is its documented mathematical definition in float32 (any
backend, any kiln float dtype), and scaled_dot_general quantizes only when no configs are given
(plain dot_general); with configs it raises NotImplementedError. Depends on kiln.lax and kiln.numpy only.
"""

import dataclasses

import ml_dtypes
import numpy as np

from kiln import lax
from kiln._src.numpy import util
from kiln._src.numpy.linalg import einsum
from kiln._src.numpy.shape_ops import repeat


@dataclasses.dataclass
class BlockScaleConfig:
    """How scaled_dot_general quantizes one operand (fields as JAX's config of the same name)."""
    mode: str  # 'mxfp8' or 'nvfp4'
    block_size: int  # elements of the contracting axis that share one scale
    data_type: object  # dtype of the quantized values
    scale_type: object  # dtype of the per-block scales
    global_scale: object  # an extra scalar scale (nvfp4) or None
    infer_only: bool  # True: no backward-pass config


def _f32(name, x):
    x = util.asarray_arg(name, x)
    return lax.convert_element_type(x, np.float32)


def scaled_matmul(lhs, rhs, lhs_scales, rhs_scales, preferred_element_type=np.float32):
    """Block-scaled batched matmul: (lhs * repeat(lhs_scales)) @ (rhs * repeat(rhs_scales))^T over the
    last axis, computed in float32. lhs (B, M, K), rhs (B, N, K), scales (B, M, K/bs) and (B, N, K/bs');
    returns (B, M, N) in preferred_element_type."""
    arrays = [util.asarray_arg("scaled_matmul", a, i) for i, a in enumerate((lhs, rhs, lhs_scales, rhs_scales))]
    a, b, a_scales, b_scales = arrays
    if not all(t.ndim == 3 for t in arrays):
        raise ValueError("scaled_matmul requires all inputs to be 3-dimensional arrays, got shapes "
                         f"{[tuple(t.shape) for t in arrays]}")
    (ba, m, k), (bb, n, kb) = a.shape, b.shape
    if k != kb or ba != bb:
        raise ValueError("scaled_matmul requires inputs a and b to have matching batch (B) and contract (K) "
                         f"dimensions, but got shapes {tuple(a.shape)} and {tuple(b.shape)}")
    (bas, mas, kas), (bbs, nbs, kbs) = a_scales.shape, b_scales.shape
    if kas != kbs or bas != bbs:
        raise ValueError("scaled_matmul requires scales to have matching batch (B) and contract (K) dimensions, "
                         f"but got shapes {tuple(a_scales.shape)} and {tuple(b_scales.shape)}")
    if mas != m or nbs != n:
        raise ValueError("scaled_matmul requires scales to match non-contract dimensions of inputs, but got "
                         f"shapes a: {tuple(a.shape)}, b: {tuple(b.shape)}, a_scales: {tuple(a_scales.shape)}, "
                         f"b_scales: {tuple(b_scales.shape)}")
    if kas == 0 or k % kas:
        raise ValueError(f"scaled_matmul: the contract dimension {k} must be a multiple of the scales' {kas}")
    out_dtype = util.dtype_arg(preferred_element_type)
    a32 = lax.mul(_f32("scaled_matmul", a), repeat(_f32("scaled_matmul", a_scales), k // kas, axis=-1))
    b32 = lax.mul(_f32("scaled_matmul", b), repeat(_f32("scaled_matmul", b_scales), k // kbs, axis=-1))
    return lax.convert_element_type(einsum("bmk,bnk->bmn", a32, b32), out_dtype)


def get_scaled_dot_general_config(mode, global_scale=None):
    """The quantization config for scaled_dot_general: 'mxfp8' (blocks of 32, float8_e4m3fn data,
    float8_e8m0fnu scales) or 'nvfp4' (blocks of 16, float4_e2m1fn data, float8_e4m3fn scales)."""
    if mode == "nvfp4":
        one = np.ones((1,), np.float32)
        return BlockScaleConfig(mode="nvfp4", block_size=16, data_type=np.dtype(ml_dtypes.float4_e2m1fn),
                                scale_type=np.dtype(ml_dtypes.float8_e4m3fn),
                                global_scale=one if global_scale is None else global_scale, infer_only=False)
    if mode == "mxfp8":
        return BlockScaleConfig(mode="mxfp8", block_size=32, data_type=np.dtype(ml_dtypes.float8_e4m3fn),
                                scale_type=np.dtype(ml_dtypes.float8_e8m0fnu), global_scale=None,
                                infer_only=False)
    raise ValueError(f"Unsupported mode: {mode}")


def scaled_dot_general(lhs, rhs, dimension_numbers, preferred_element_type=np.float32, configs=None,
                       implementation=None):
    """dot_general whose operands are block-quantized per `configs` first. Without configs it is
    lax.dot_general with preferred_element_type (as in JAX); quantizing needs float8/float4 dtypes,
    which kiln lacks, so configs raise NotImplementedError. `implementation` is ignored, as in JAX."""
    if configs is None:
        return lax.dot_general(lhs, rhs, dimension_numbers, preferred_element_type=preferred_element_type)
    raise NotImplementedError("scaled_dot_general with configs quantizes to float8/float4, dtypes kiln does not "
                              "support; call it with configs=None (a plain dot_general) or use scaled_matmul")
