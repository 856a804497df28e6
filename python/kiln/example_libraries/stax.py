"""kiln.example_libraries.stax: jax.example_libraries.stax, neural-net layers as function pairs.

A layer is a pair (init_fun, apply_fun): init_fun(key, input_shape) -> (output_shape, params) and
apply_fun(params, inputs, **kwargs) -> outputs (a key travels as the keyword `rng`). Key splits,
initializers and formulas are JAX 0.10.2's, so the same key gives the same parameters bit for bit.
Built on kiln's public API only (lax, random, numpy, nn); nothing here knows about tracing.
"""

import functools
import math

from kiln import lax
from kiln import random
from kiln import numpy as jnp
from kiln.nn import (elu, gelu, leaky_relu, log_softmax, relu, selu, sigmoid, softmax, softplus,
                     standardize)
from kiln.nn.initializers import glorot_normal, normal, ones, zeros

# the older names JAX keeps for compatibility
glorot = glorot_normal
randn = normal
logsoftmax = log_softmax


def Dense(out_dim, W_init=glorot_normal(), b_init=normal()):
    """A fully connected layer: inputs @ W + b over the last axis, W of shape (in_dim, out_dim)."""
    def init_fun(rng, input_shape):
        w_key, b_key = random.split(rng)
        params = (W_init(w_key, (input_shape[-1], out_dim)), b_init(b_key, (out_dim,)))
        return tuple(input_shape[:-1]) + (out_dim,), params

    def apply_fun(params, inputs, **kwargs):
        W, b = params
        return jnp.dot(inputs, W) + b
    return init_fun, apply_fun


def _kernel_and_bias_shapes(dimension_numbers, out_chan, filter_shape, input_shape):
    """The kernel shape in rhs_spec order and the bias shape (out_chan on 'C', 1 elsewhere)."""
    lhs_spec, rhs_spec, out_spec = dimension_numbers
    spatial = iter(filter_shape)
    kernel = []
    for letter in rhs_spec:
        if letter == "O":
            kernel.append(out_chan)
        elif letter == "I":
            kernel.append(input_shape[lhs_spec.index("C")])
        else:
            kernel.append(next(spatial))
    bias = [out_chan if letter == "C" else 1 for letter in out_spec]
    return kernel, bias


def _conv_layer(dimension_numbers, out_chan, filter_shape, strides, W_init, b_init, output_shape_of,
                convolve):
    """The shared body of GeneralConv and GeneralConvTranspose; they differ in shape rule and op."""
    rhs_spec = dimension_numbers[1]
    unit = (1,) * len(filter_shape)
    strides = strides or unit
    if W_init is None:
        W_init = glorot_normal(rhs_spec.index("I"), rhs_spec.index("O"))

    def init_fun(rng, input_shape):
        kernel_shape, bias_shape = _kernel_and_bias_shapes(dimension_numbers, out_chan, filter_shape,
                                                           input_shape)
        out_shape = output_shape_of(input_shape, kernel_shape, strides)
        w_key, b_key = random.split(rng)
        return out_shape, (W_init(w_key, kernel_shape), b_init(b_key, bias_shape))

    def apply_fun(params, inputs, **kwargs):
        W, b = params
        return convolve(inputs, W, strides, unit) + b
    return init_fun, apply_fun


def GeneralConv(dimension_numbers, out_chan, filter_shape, strides=None, padding="VALID", W_init=None,
                b_init=normal(1e-6)):
    """A convolution layer; dimension_numbers is (lhs_spec, rhs_spec, out_spec), e.g. NHWC/HWIO/NHWC."""
    def output_shape_of(input_shape, kernel_shape, strides):
        return lax.conv_general_shape_tuple(input_shape, kernel_shape, strides, padding,
                                            dimension_numbers)

    def convolve(inputs, W, strides, unit):
        return lax.conv_general_dilated(inputs, W, strides, padding, unit, unit,
                                        dimension_numbers=dimension_numbers)
    return _conv_layer(dimension_numbers, out_chan, filter_shape, strides, W_init, b_init,
                       output_shape_of, convolve)


Conv = functools.partial(GeneralConv, ("NHWC", "HWIO", "NHWC"))


def GeneralConvTranspose(dimension_numbers, out_chan, filter_shape, strides=None, padding="VALID",
                         W_init=None, b_init=normal(1e-6)):
    """A transposed-convolution layer (lax.conv_transpose) with the given dimension_numbers."""
    def output_shape_of(input_shape, kernel_shape, strides):
        return lax.conv_transpose_shape_tuple(input_shape, kernel_shape, strides, padding,
                                              dimension_numbers)

    def convolve(inputs, W, strides, unit):
        return lax.conv_transpose(inputs, W, strides, padding, dimension_numbers=dimension_numbers)
    return _conv_layer(dimension_numbers, out_chan, filter_shape, strides, W_init, b_init,
                       output_shape_of, convolve)


Conv1DTranspose = functools.partial(GeneralConvTranspose, ("NHC", "HIO", "NHC"))
ConvTranspose = functools.partial(GeneralConvTranspose, ("NHWC", "HWIO", "NHWC"))


def BatchNorm(axis=(0, 1, 2), epsilon=1e-5, center=True, scale=True, beta_init=zeros, gamma_init=ones):
    """Standardizes over `axis`, then scales by gamma and shifts by beta (the kept axes' shape).

    A disabled center or scale stores () in its place; the key is split in two either way.
    """
    if jnp.isscalar(axis):
        axis = (axis,)

    def init_fun(rng, input_shape):
        kept = tuple(d for i, d in enumerate(input_shape) if i not in axis)
        beta_key, gamma_key = random.split(rng)
        beta = beta_init(beta_key, kept) if center else ()
        gamma = gamma_init(gamma_key, kept) if scale else ()
        return input_shape, (beta, gamma)

    def apply_fun(params, x, **kwargs):
        beta, gamma = params
        # beta and gamma get a unit axis at each normalized position
        spread = tuple(None if i in axis else slice(None) for i in range(jnp.ndim(x)))
        z = standardize(x, axis, epsilon=epsilon)
        if scale:
            z = gamma[spread] * z
        if center:
            z = z + beta[spread]
        return z
    return init_fun, apply_fun


def elementwise(fun, **fun_kwargs):
    """A parameterless layer applying fun(inputs, **fun_kwargs)."""
    def init_fun(rng, input_shape):
        return input_shape, ()

    def apply_fun(params, inputs, **kwargs):
        return fun(inputs, **fun_kwargs)
    return init_fun, apply_fun


Tanh = elementwise(jnp.tanh)
Relu = elementwise(relu)
Exp = elementwise(jnp.exp)
LogSoftmax = elementwise(log_softmax, axis=-1)
Softmax = elementwise(softmax, axis=-1)
Softplus = elementwise(softplus)
Sigmoid = elementwise(sigmoid)
Elu = elementwise(elu)
LeakyRelu = elementwise(leaky_relu)
Selu = elementwise(selu)
Gelu = elementwise(gelu)


def _insert_unit_axes(window_shape, strides, spec):
    """Window and strides over every input axis: 1 at the batch and channel axes.

    Without a spec the layout is N, spatial..., C.
    """
    if spec is None:
        batch_and_channel = (0, len(window_shape) + 1)
    else:
        batch_and_channel = (spec.index("N"), spec.index("C"))
    window, steps = list(window_shape), list(strides)
    for i in sorted(batch_and_channel):
        window.insert(i, 1)
        steps.insert(i, 1)
    return tuple(window), tuple(steps)


def _window_counts(inputs, window, strides, padding, spec):
    """How many input elements (padding excluded) each output of a pooling window covers,
    shaped to broadcast against the pooled output."""
    if spec is None:
        batch_and_channel = (0, inputs.ndim - 1)
    else:
        batch_and_channel = (spec.index("N"), spec.index("C"))
    spatial = tuple(n for i, n in enumerate(inputs.shape) if i not in batch_and_channel)
    counts = lax.reduce_window(jnp.ones(spatial, dtype=inputs.dtype), 0., lax.add, window, strides,
                               padding)
    for i in sorted(batch_and_channel):
        counts = jnp.expand_dims(counts, i)
    return counts


def _pooling_layer(reducer, init_val, averages=False):
    """A pooling-layer constructor reducing windows with `reducer` from `init_val`; an averaging
    one divides by each window's count of real (unpadded) elements."""
    def PoolingLayer(window_shape, strides=None, padding="VALID", spec=None):
        """A pooling layer over the spatial axes; spec (e.g. 'NHWC') names the layout."""
        spatial_window = tuple(window_shape)
        spatial_strides = tuple(strides or (1,) * len(window_shape))
        window, steps = _insert_unit_axes(spatial_window, spatial_strides, spec)

        def init_fun(rng, input_shape):
            pads = lax.padtype_to_pads(input_shape, window, steps, padding)
            unit = (1,) * len(window)
            return lax.reduce_window_shape_tuple(input_shape, window, steps, pads, unit, unit), ()

        def apply_fun(params, inputs, **kwargs):
            out = lax.reduce_window(inputs, init_val, reducer, window, steps, padding)
            if averages:
                out = out / _window_counts(inputs, window_shape, spatial_strides, padding, spec)
            return out
        return init_fun, apply_fun
    return PoolingLayer


MaxPool = _pooling_layer(lax.max, -jnp.inf)
SumPool = _pooling_layer(lax.add, 0.)
AvgPool = _pooling_layer(lax.add, 0., averages=True)


def _flatten_layer():
    def init_fun(rng, input_shape):
        return (input_shape[0], math.prod(input_shape[1:])), ()

    def apply_fun(params, inputs, **kwargs):
        return jnp.reshape(inputs, (inputs.shape[0], -1))
    return init_fun, apply_fun


Flatten = _flatten_layer()
Identity = (lambda rng, input_shape: (input_shape, ()),
            lambda params, inputs, **kwargs: inputs)


def FanOut(num):
    """A layer copying its input into a list of `num` outputs."""
    def init_fun(rng, input_shape):
        return [input_shape] * num, ()

    def apply_fun(params, inputs, **kwargs):
        return [inputs] * num
    return init_fun, apply_fun


FanInSum = (lambda rng, input_shape: (input_shape[0], ()),
            lambda params, inputs, **kwargs: sum(inputs))


def FanInConcat(axis=-1):
    """A layer concatenating its list of inputs along `axis`."""
    def init_fun(rng, input_shape):
        first = tuple(input_shape[0])
        ax = axis % len(first)
        joined = sum(shape[ax] for shape in input_shape)
        return first[:ax] + (joined,) + first[ax + 1:], ()

    def apply_fun(params, inputs, **kwargs):
        return jnp.concatenate(inputs, axis)
    return init_fun, apply_fun


def Dropout(rate, mode="train"):
    """Dropout in mode 'train', identity otherwise.

    As in JAX, `rate` is the probability of KEEPING an element: kept elements are divided by it.
    """
    def init_fun(rng, input_shape):
        return input_shape, ()

    def apply_fun(params, inputs, **kwargs):
        rng = kwargs.get("rng", None)
        if rng is None:
            raise ValueError(
                "stax.Dropout: apply_fun needs a PRNG key; call apply_fun(params, inputs, rng=key) "
                "(e.g. key = kiln.random.key(0)) instead of apply_fun(params, inputs)")
        if mode != "train":
            return inputs
        keep = random.bernoulli(rng, rate, inputs.shape)
        return jnp.where(keep, inputs / rate, 0)
    return init_fun, apply_fun


def _layer_keys(rng, count):
    """One key per layer for apply_fun, or Nones when no key was given."""
    if rng is None:
        return (None,) * count
    return random.split(rng, count)


def serial(*layers):
    """The layers applied one after another; params is a list with one entry per layer."""
    init_funs, apply_funs = zip(*layers)

    def init_fun(rng, input_shape):
        params = []
        shape = input_shape
        for layer_init in init_funs:
            rng, layer_key = random.split(rng)
            shape, layer_params = layer_init(layer_key, shape)
            params.append(layer_params)
        return shape, params

    def apply_fun(params, inputs, **kwargs):
        keys = _layer_keys(kwargs.pop("rng", None), len(apply_funs))
        for layer_apply, layer_params, key in zip(apply_funs, params, keys):
            inputs = layer_apply(layer_params, inputs, rng=key, **kwargs)
        return inputs
    return init_fun, apply_fun


def parallel(*layers):
    """The i-th layer applied to the i-th of a sequence of inputs (pairs with FanOut and FanIn*)."""
    init_funs, apply_funs = zip(*layers)

    def init_fun(rng, input_shape):
        keys = random.split(rng, len(init_funs))
        results = [layer_init(key, shape) for layer_init, key, shape
                   in zip(init_funs, keys, input_shape)]
        return tuple(zip(*results))

    def apply_fun(params, inputs, **kwargs):
        keys = _layer_keys(kwargs.pop("rng", None), len(apply_funs))
        return [layer_apply(p, x, rng=key, **kwargs)
                for layer_apply, p, x, key in zip(apply_funs, params, inputs, keys)]
    return init_fun, apply_fun


def shape_dependent(make_layer):
    """A layer built by make_layer(input_shape) only once the input shape is known."""
    def init_fun(rng, input_shape):
        return make_layer(input_shape)[0](rng, input_shape)

    def apply_fun(params, inputs, **kwargs):
        return make_layer(inputs.shape)[1](params, inputs, **kwargs)
    return init_fun, apply_fun
