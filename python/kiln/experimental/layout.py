"""jax.experimental.layout: array memory layouts. kiln keeps every array in row-major order, so a
layout request is recorded (Format/Layout objects carry it) and a constraint leaves the value as
it is."""


class Layout:
    """An array layout: the order of its axes in memory, major to minor (kiln: row-major)."""

    def __init__(self, major_to_minor=None, tiling=(), sub_byte_element_size_in_bits=0):
        self.major_to_minor = None if major_to_minor is None else tuple(major_to_minor)
        self.tiling, self.sub_byte_element_size_in_bits = tuple(tiling), sub_byte_element_size_in_bits

    AUTO = None

    def __eq__(self, other):
        return isinstance(other, Layout) and (self.major_to_minor, self.tiling) == (other.major_to_minor, other.tiling)

    def __hash__(self):
        return hash((self.major_to_minor, self.tiling))

    def __repr__(self):
        return f"Layout(major_to_minor={self.major_to_minor})"


class Format:
    """A layout with a sharding (jax.experimental.layout.Format)."""

    def __init__(self, layout=None, sharding=None):
        if sharding is None and layout is not None and not isinstance(layout, Layout):
            layout, sharding = None, layout  # Format(sharding)
        self.layout, self.sharding = layout, sharding

    def __eq__(self, other):
        return isinstance(other, Format) and (self.layout, self.sharding) == (other.layout, other.sharding)

    def __hash__(self):
        return hash((self.layout, id(self.sharding)))

    def __repr__(self):
        return f"Format({self.layout!r}, {self.sharding!r})"


def with_layout_constraint(x, layout):
    """x (kiln's arrays are row-major; a row-major request is what x is, any other is not honoured)."""
    if isinstance(layout, Layout) and layout.major_to_minor is not None and \
            tuple(layout.major_to_minor) != tuple(range(getattr(x, "ndim", 0))):
        raise NotImplementedError(f"with_layout_constraint: kiln keeps arrays row-major; the layout "
                                  f"{layout.major_to_minor} is not supported")
    return x
