"""kiln.example_libraries.optimizers: jax.example_libraries.optimizers, optimizers as function triples.

An optimizer is (init_fun, update_fun, get_params): init_fun(params) -> OptimizerState,
update_fun(step, grads, state) -> state, get_params(state) -> params, over any pytree of arrays.
Update rules and schedules follow JAX 0.10.2's formulas term for term, so kiln and JAX agree to
rounding. Built on kiln's public API only (numpy, tree_util).
"""

from __future__ import annotations

import functools
from collections import namedtuple
from collections.abc import Callable
from functools import partial
from typing import Any, NamedTuple

from kiln import numpy as jnp
from kiln import tree_util
from kiln.api_util import safe_map, safe_zip, unzip2


# as in JAX's module, map and zip here check lengths
map = safe_map
zip = safe_zip


# The state of a pytree optimizer: the flat list of per-leaf states (each itself flattened), the
# parameters' treedef and one treedef per leaf state. It is a pytree whose only child is
# packed_state, so jit and the other transforms see just the arrays.
OptimizerState = namedtuple("OptimizerState", ["packed_state", "tree_def", "subtree_defs"])
tree_util.register_pytree_node(
    OptimizerState,
    lambda state: ((state.packed_state,), (state.tree_def, state.subtree_defs)),
    lambda aux, children: OptimizerState(children[0], aux[0], aux[1]))

Array = Any
Params = Any
State = Any
Updates = Params

InitFn = Callable[[Params], OptimizerState]
Step = int
UpdateFn = Callable[[Step, Updates, OptimizerState], OptimizerState]
ParamsFn = Callable[[OptimizerState], Params]


class Optimizer(NamedTuple):
    """The (init_fn, update_fn, params_fn) triple an optimizer constructor returns."""
    init_fn: InitFn
    update_fn: UpdateFn
    params_fn: ParamsFn


Schedule = Callable[[Step], float]


def _flatten_states(states):
    return unzip2(map(tree_util.tree_flatten, states))


def optimizer(opt_maker):
    """Decorator lifting an optimizer written for one array to pytrees of arrays.

    opt_maker(*args, **kwargs) returns (init, update, get_params) working on one array; the
    decorated constructor returns an Optimizer whose functions take whole parameter pytrees and
    keep the state as an OptimizerState.
    """
    @functools.wraps(opt_maker)
    def tree_opt_maker(*args, **kwargs):
        init, update, get_params = opt_maker(*args, **kwargs)

        @functools.wraps(init)
        def tree_init(x0_tree):
            leaves, treedef = tree_util.tree_flatten(x0_tree)
            packed, subtrees = _flatten_states([init(x0) for x0 in leaves])
            return OptimizerState(packed, treedef, subtrees)

        @functools.wraps(update)
        def tree_update(i, grad_tree, opt_state):
            packed, treedef, subtrees = opt_state
            grads, grad_treedef = tree_util.tree_flatten(grad_tree)
            if grad_treedef != treedef:
                raise TypeError(
                    "optimizer update_fun: the gradient tree's structure differs from the parameter "
                    f"tree the optimizer was initialized with: parameters {treedef}, gradients "
                    f"{grad_treedef}; pass gradients shaped like the parameters")
            states = map(tree_util.tree_unflatten, subtrees, packed)
            new_packed, new_subtrees = _flatten_states(map(partial(update, i), grads, states))
            for before, after in zip(subtrees, new_subtrees):
                if before != after:
                    raise TypeError(
                        "optimizer update_fun: the per-leaf update changed the state's structure "
                        f"from {before} to {after}; an update must return a state shaped like its "
                        "input")
            return OptimizerState(new_packed, treedef, subtrees)

        @functools.wraps(get_params)
        def tree_get_params(opt_state):
            packed, treedef, subtrees = opt_state
            states = map(tree_util.tree_unflatten, subtrees, packed)
            return tree_util.tree_unflatten(treedef, map(get_params, states))

        return Optimizer(tree_init, tree_update, tree_get_params)
    return tree_opt_maker


def _first(state):
    return state[0]


@optimizer
def sgd(step_size):
    """Stochastic gradient descent: x <- x - step_size(i) * g."""
    step_size = make_schedule(step_size)

    def init(x0):
        return x0

    def update(i, g, x):
        return x - step_size(i) * g

    def get_params(x):
        return x
    return Optimizer(init, update, get_params)


@optimizer
def momentum(step_size: Schedule, mass: float):
    """SGD with heavy-ball momentum: v <- mass * v + g; x <- x - step_size(i) * v."""
    step_size = make_schedule(step_size)

    def init(x0):
        return x0, jnp.zeros_like(x0)

    def update(i, g, state):
        x, velocity = state
        velocity = mass * velocity + g
        return x - step_size(i) * velocity, velocity
    return init, update, _first


@optimizer
def nesterov(step_size: Schedule, mass: float):
    """SGD with Nesterov momentum: the step looks ahead along the updated velocity."""
    step_size = make_schedule(step_size)

    def init(x0):
        return x0, jnp.zeros_like(x0)

    def update(i, g, state):
        x, velocity = state
        velocity = mass * velocity + g
        return x - step_size(i) * (mass * velocity + g), velocity
    return init, update, _first


@optimizer
def adagrad(step_size, momentum=0.9):
    """Adagrad (Duchi et al. 2011) with momentum on the scaled gradient; a zero accumulated
    square leaves its element unscaled by 0 rather than dividing by zero."""
    step_size = make_schedule(step_size)

    def init(x0):
        return x0, jnp.zeros_like(x0), jnp.zeros_like(x0)

    def update(i, g, state):
        x, g_sq, m = state
        g_sq = g_sq + jnp.square(g)
        inv_root = jnp.where(g_sq > 0, 1. / jnp.sqrt(g_sq), 0.0)
        m = (1. - momentum) * (g * inv_root) + momentum * m
        return x - step_size(i) * m, g_sq, m
    return init, update, _first


@optimizer
def rmsprop(step_size, gamma=0.9, eps=1e-8):
    """RMSProp: a decaying mean of squared gradients divides each step."""
    step_size = make_schedule(step_size)

    def init(x0):
        return x0, jnp.zeros_like(x0)

    def update(i, g, state):
        x, mean_sq = state
        mean_sq = mean_sq * gamma + jnp.square(g) * (1. - gamma)
        return x - step_size(i) * g / jnp.sqrt(mean_sq + eps), mean_sq
    return init, update, _first


@optimizer
def rmsprop_momentum(step_size, gamma=0.9, eps=1e-8, momentum=0.9):
    """RMSProp whose scaled steps accumulate in a momentum term."""
    step_size = make_schedule(step_size)

    def init(x0):
        return x0, jnp.zeros_like(x0), jnp.zeros_like(x0)

    def update(i, g, state):
        x, mean_sq, mom = state
        mean_sq = mean_sq * gamma + jnp.square(g) * (1. - gamma)
        mom = momentum * mom + step_size(i) * g / jnp.sqrt(mean_sq + eps)
        return x - mom, mean_sq, mom
    return init, update, _first


def _bias_correction(beta, dtype, i):
    """1 - beta**(i+1), with beta held in the moments' dtype as JAX does."""
    return 1 - jnp.asarray(beta, dtype) ** (i + 1)


@optimizer
def adam(step_size, b1=0.9, b2=0.999, eps=1e-8):
    """Adam (Kingma and Ba 2015): bias-corrected first and second moment estimates."""
    step_size = make_schedule(step_size)

    def init(x0):
        return x0, jnp.zeros_like(x0), jnp.zeros_like(x0)

    def update(i, g, state):
        x, m, v = state
        m = (1 - b1) * g + b1 * m
        v = (1 - b2) * jnp.square(g) + b2 * v
        m_hat = m / _bias_correction(b1, m.dtype, i)
        v_hat = v / _bias_correction(b2, m.dtype, i)
        return x - step_size(i) * m_hat / (jnp.sqrt(v_hat) + eps), m, v
    return init, update, _first


@optimizer
def adamax(step_size, b1=0.9, b2=0.999, eps=1e-8):
    """AdaMax: Adam with the second moment replaced by a decaying infinity norm."""
    step_size = make_schedule(step_size)

    def init(x0):
        return x0, jnp.zeros_like(x0), jnp.zeros_like(x0)

    def update(i, g, state):
        x, m, u = state
        m = (1 - b1) * g + b1 * m
        u = jnp.maximum(b2 * u, jnp.abs(g))
        x = x - (step_size(i) / _bias_correction(b1, m.dtype, i)) * m / (u + eps)
        return x, m, u
    return init, update, _first


@optimizer
def sm3(step_size, momentum=0.9):
    """SM3 (Anil et al. 2019): one accumulator vector per axis instead of one per element.

    Scalars are promoted to shape (1,) inside the state and restored by get_params.
    """
    step_size = make_schedule(step_size)

    def along_axis(ndim, v, axis):
        # v (1-D) viewed as an ndim array varying only along `axis`; a scalar's gradient (ndim 0)
        # meets its (1,)-shaped state as JAX's list splice does, by keeping v whole
        index = [None] * ndim
        index[axis:axis + 1] = [slice(None)]
        return v[tuple(index)]

    def init(x0):
        shape = x0.shape
        x0 = jnp.atleast_1d(x0)
        accumulators = [jnp.zeros(n, dtype=x0.dtype) for n in x0.shape]
        return x0, jnp.zeros_like(x0), accumulators, shape

    def update(i, g, state):
        x, m, accumulators, shape = state
        spread = [along_axis(g.ndim, v, axis) for axis, v in enumerate(accumulators)]
        accum = functools.reduce(jnp.minimum, spread) + jnp.square(g)
        inv_root = jnp.where(accum > 0, 1. / jnp.sqrt(accum), 0)
        m = (1. - momentum) * (g * inv_root) + momentum * m
        x = x - step_size(i) * m
        accumulators = [accum.max(tuple(a for a in range(x.ndim) if a != axis))
                        for axis in range(x.ndim)]
        return x, m, accumulators, shape

    def get_params(state):
        return state[0].reshape(state[3])
    return init, update, get_params


# Learning-rate schedules: functions of the step index.

def constant(step_size) -> Schedule:
    def schedule(i):
        return step_size
    return schedule


def exponential_decay(step_size, decay_steps, decay_rate):
    def schedule(i):
        return step_size * decay_rate ** (i / decay_steps)
    return schedule


def inverse_time_decay(step_size, decay_steps, decay_rate, staircase=False):
    if staircase:
        def schedule(i):
            return step_size / (1 + decay_rate * jnp.floor(i / decay_steps))
    else:
        # decay_rate * i first, then / decay_steps: JAX's order, hence its rounding
        def schedule(i):
            return step_size / (1 + decay_rate * i / decay_steps)
    return schedule


def polynomial_decay(step_size, decay_steps, final_step_size, power=1.0):
    def schedule(step_num):
        step_num = jnp.minimum(step_num, decay_steps)
        fraction_left = (1 - step_num / decay_steps) ** power
        return fraction_left * (step_size - final_step_size) + final_step_size
    return schedule


def piecewise_constant(boundaries: Any, values: Any):
    boundaries = jnp.array(boundaries)
    values = jnp.array(values)
    if not boundaries.ndim == values.ndim == 1:
        raise ValueError("boundaries and values must be sequences")
    if not boundaries.shape[0] == values.shape[0] - 1:
        raise ValueError("boundaries length must be one shorter than values length")

    def schedule(i):
        return values[jnp.sum(i > boundaries)]
    return schedule


def make_schedule(scalar_or_schedule: float | Schedule) -> Schedule:
    """A schedule as given, or a constant one for a scalar; anything else is a TypeError."""
    if callable(scalar_or_schedule):
        return scalar_or_schedule
    if jnp.ndim(scalar_or_schedule) == 0:
        return constant(scalar_or_schedule)
    raise TypeError(type(scalar_or_schedule))


def l2_norm(tree):
    """The l2 norm of all the leaves of a pytree taken together."""
    leaves = tree_util.tree_leaves(tree)
    return jnp.sqrt(sum(jnp.vdot(x, x) for x in leaves))


def clip_grads(grad_tree, max_norm):
    """The gradients scaled by max_norm / norm when their joint l2 norm reaches max_norm."""
    norm = l2_norm(grad_tree)
    return tree_util.tree_map(lambda g: jnp.where(norm < max_norm, g, g * (max_norm / norm)),
                              grad_tree)


class JoinPoint:
    """A leaf of an unpacked optimizer state holding one parameter's state subtree.

    It is deliberately no pytree node, so flattening stops at it; iterating yields the subtree.
    """

    def __init__(self, subtree):
        self.subtree = subtree

    def __iter__(self):
        yield self.subtree


def unpack_optimizer_state(opt_state):
    """An OptimizerState as the parameter pytree with a JoinPoint (holding that leaf's state) at
    each leaf, e.g. for serialization."""
    packed, treedef, subtrees = opt_state
    states = map(tree_util.tree_unflatten, subtrees, packed)
    return tree_util.tree_unflatten(treedef, [JoinPoint(s) for s in states])


def pack_optimizer_state(marked_pytree):
    """The inverse of unpack_optimizer_state."""
    joins, treedef = tree_util.tree_flatten(marked_pytree)
    if not all(isinstance(j, JoinPoint) for j in joins):
        raise AssertionError("pack_optimizer_state: every leaf must be a JoinPoint, as "
                             "unpack_optimizer_state makes them")
    packed, subtrees = _flatten_states([j.subtree for j in joins])
    return OptimizerState(packed, treedef, subtrees)
