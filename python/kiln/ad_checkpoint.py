"""jax.ad_checkpoint: naming values for rematerialization policies (checkpoint_name) and the
policies themselves. print_saved_residuals is not provided: kiln's reverse mode does not keep a
list of residuals to print (its backward program recomputes or reuses values as the policies say)."""
import collections

from kiln._src.custom import checkpoint, checkpoint_name, checkpoint_policies, remat  # noqa: F401

# What a policy function may answer instead of a bool (JAX's sentinels); kiln runs the policies of
# checkpoint_policies itself and treats other callables as nothing_saveable.
class _Answer:
    def __init__(self, name):
        self.name = name

    def __repr__(self):
        return self.name


Saveable = _Answer("Saveable")
Recompute = _Answer("Recompute")
Offloadable = collections.namedtuple("Offloadable", ["src", "dst"])
