"""The ecosystem harness: how much of JAX's library ecosystem (optax, chex, flax, equinox,
diffrax, numpyro, distrax, dm-haiku, blackjax) runs on kiln unmodified, measured by each
library's own tests. Run `make ecosystem` or `python3 -m tests.ecosystem --help`; README.md."""
