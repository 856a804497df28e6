"""kiln's differential fuzzer against JAX (issue 32): random programs over the jnp/lax surface run
in both libraries under eager, jit, grad, vmap and their compositions; disagreements classified,
isolated, shrunk and deduplicated. See README.md."""
