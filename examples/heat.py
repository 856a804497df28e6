"""2-D heat diffusion with explicit finite differences, written once for any NumPy-like module `xp`
(kiln.numpy or numpy).

The grid has insulated edges: a mirrored ghost cell on each side makes the flux through the boundary
zero, so the total heat is conserved exactly (up to floating-point rounding).
"""

import numpy as np


def step(xp, u, alpha):
    """One explicit Euler step of du/dt = laplacian(u), with alpha = dt/dx^2 (stable for alpha <= 0.25)."""
    up = xp.concatenate([u[:1], u[:-1]], axis=0)
    down = xp.concatenate([u[1:], u[-1:]], axis=0)
    left = xp.concatenate([u[:, :1], u[:, :-1]], axis=1)
    right = xp.concatenate([u[:, 1:], u[:, -1:]], axis=1)
    return u + alpha * (up + down + left + right - 4.0 * u)


def steps(xp, u, alpha, count):
    """`count` steps in a row (unrolled when traced, so a jitted call runs them as one program)."""
    for _ in range(count):
        u = step(xp, u, alpha)
    return u


def initial_condition(n):
    """A room at temperature 0 with a Gaussian hot spot and a hot square plate, well away from the walls."""
    y, x = np.mgrid[0:n, 0:n].astype(np.float64)
    spot = 100.0 * np.exp(-((x - 0.35 * n) ** 2 + (y - 0.40 * n) ** 2) / (2 * (0.03 * n) ** 2))
    plate = np.zeros((n, n))
    lo, hi = int(0.55 * n), int(0.70 * n)
    plate[lo:hi, lo:hi] = 60.0
    return (spot + plate).astype(np.float32)


def spread(u):
    """Variance of the heat distribution about its centre (sum over both axes), in cells^2.

    For free diffusion with diffusivity D it grows exactly as 4*D*t (2*D*t per axis), whatever the
    initial shape; here D*t = alpha * steps.
    """
    u = np.asarray(u, dtype=np.float64)
    y, x = np.mgrid[0:u.shape[0], 0:u.shape[1]]
    total = u.sum()
    cx, cy = (u * x).sum() / total, (u * y).sum() / total
    return float((u * ((x - cx) ** 2 + (y - cy) ** 2)).sum() / total)
