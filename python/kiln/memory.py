"""kiln.memory: jax.memory's memory spaces (kiln has one space per device)."""
import enum


class Space(enum.Enum):
    Device = "device"
    Host = "pinned_host"
    Any = "any"
