"""kiln.ad: jax.ad's public names (markers of JAX's gradient-Ref machinery, which kiln does not
have: kiln's Refs are written back at trace edges)."""


class _Marker:
    def __init__(self, *args, **kwargs):
        raise NotImplementedError(f"ad.{type(self).__name__} is not supported by kiln (JAX's gradient Refs)")


class GradRef(_Marker):
    pass


class GradValue(_Marker):
    pass


class DontWant(_Marker):
    pass


class DidntWant(_Marker):
    pass
