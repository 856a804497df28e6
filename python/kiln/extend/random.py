"""jax.extend.random: PRNG implementations."""
from kiln.random import key_data, wrap_key_data  # noqa: F401


def threefry_2x32(keypair, count):
    raise NotImplementedError("jax.extend.random.threefry_2x32: use kiln.random's keys and samplers")


def define_prng_impl(*args, **kwargs):
    raise NotImplementedError("jax.extend.random.define_prng_impl: kiln's PRNG implementation is threefry2x32; "
                              "user-defined PRNG implementations are not supported")
