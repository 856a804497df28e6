"""jax.experimental.sparse: sparse arrays are not supported by kiln. The names exist so libraries
that import them import; making a sparse array raises NotImplementedError."""


class BCOO:
    """A batched-coordinate sparse array (not supported by kiln)."""

    def __init__(self, *args, **kwargs):
        raise NotImplementedError("jax.experimental.sparse.BCOO: kiln has no sparse arrays; use a dense array")

    @classmethod
    def fromdense(cls, *args, **kwargs):
        raise NotImplementedError("jax.experimental.sparse.BCOO.fromdense: kiln has no sparse arrays")

    @classmethod
    def from_scipy_sparse(cls, *args, **kwargs):
        raise NotImplementedError("jax.experimental.sparse.BCOO.from_scipy_sparse: kiln has no sparse arrays; "
                                  "convert with .toarray() first")


class BCSR(BCOO):
    """A batched compressed-sparse-row array (not supported by kiln)."""


def sparsify(f, *args, **kwargs):
    raise NotImplementedError("jax.experimental.sparse.sparsify: kiln has no sparse arrays")


def todense(x):
    raise NotImplementedError("jax.experimental.sparse.todense: kiln has no sparse arrays")
