"""kiln.example_libraries: jax.example_libraries, the small stax layer library and the optimizers.

Import the submodules by name (`from kiln.example_libraries import stax, optimizers`), as with JAX,
whose package __init__ imports nothing. Built on kiln's public API only.
"""
