"""kiln.random's samplers give JAX's numbers for the same keys (threefry-2x32, partitionable).

Every expected value below is a literal printed by jax 0.10.2 on the CPU (jax_enable_x64 off,
except in X64) from the same call with `jax.random` in place of `kiln.random`, e.g.
    print(jax.random.gamma(jax.random.PRNGKey(0), jnp.array([0.3, 1.0, 2.5, 10.0, 0.05])).tolist())
and for TRANSFORMS the same jax.vmap / jax.lax.fori_loop program. The suite never imports JAX.

EXACT values are compared bit for bit: integers, and floats that JAX builds from the bits with
exactly rounded operations (uniform, incl. the fused multiply-add XLA makes of a range's scaling,
and 16-bit draws, whose erf_inv both compute in float32 and round). CLOSE values pass through transcendental
functions (erf_inv, log, log1p, exp, tan, pow, lgamma) or LAPACK, whose last bits differ between
XLA's implementations and kiln's: they are compared within a stated number of ulps (of each
expected value), the largest difference seen on these keys (XLA's float32 erf_inv itself is up to
~65 ulps off in the tails, where kiln's is within 3)."""
import ml_dtypes
import numpy as np
import pytest

import kiln
import kiln.numpy as jnp
from kiln import lax
from kiln import random as kr

K = kr.PRNGKey
bf16 = ml_dtypes.bfloat16

# Printed by JAX (see the module docstring); EXACT, CLOSE and TRANSFORMS with jax_enable_x64 off.
EXACT = {
    "key_data_42": [0, 42],
    "split_typed_3": [[1832780943, 270669613], [64467757, 2916123636], [2465931498, 255383827]],
    "fold_in_max": [2398536845, 3890976714],
    "bits_u8": [183, 62, 122, 241, 164, 188],
    "bits_u16": [14519, 2110, 46458, 49137, 37796, 5820],
    "uniform_f16": [4.07, 3.852, 1.18, -1.32, -1.125, -0.1094],
    "uniform_bf16": [0.25, 0.125, 4.25, 3.25, -2.125, 2.625],
    "normal_f16": [-1.203, -0.7393, -1.645, -0.5327, 0.744, -0.1741],
    "normal_bf16": [-0.0146484, 0.730469, 1.125, -0.878906, 0.472656, -0.271484],
    # separately rounded mul+add would differ at 5 of 16
    "uniform_range": [-2.594481, 0.77112675, 3.4504232, 2.3433383, 1.0610087, -2.7368963, 5.1136904, 3.9440777,
                      0.2901523, 5.8000736, 5.0780835, 3.5300486, 2.4886894, -2.9575727, -2.773236, 4.5426917],
    "bernoulli": [False, False, True, False, True, False],
    "bernoulli_high": [False, False, True, False, False, False],
    "randint": [9, 0, 2, 3, 1, 7, 2, 3],
    "randint_neg": [20, 21, 23, -76, -99, -58, -42, 31],
    "randint_u8_full": [252, 175, 224, 105, 160, 172, 22, 149],
    "randint_i16": [996, -73, 40, 353, -232, -316, -562, 381],
    "randint_bounds": [[1, 17, 540], [3, 18, 884]],
    "randint_empty_range": [5, 5, 5, 5],
    "permutation_int": [0, 1, 8, 5, 6, 4, 3, 2, 7, 9],
    "permutation_axis1": [[0, 1, 3, 2], [4, 5, 7, 6], [8, 9, 11, 10]],
    "permutation_independent": [[0, 1, 3, 2], [5, 6, 4, 7], [8, 10, 11, 9]],
    "permutation_2000_head": [1745, 1879, 716, 1217, 48, 240, 1245, 238],
    "choice": [9, 0, 2, 3],
    "choice_no_replace": [0, 1, 8, 5],
    "choice_p": [0, 0, 3, 2, 2, 4],
    "choice_p_no_replace": [1, 0, 4],
    "choice_axis1": [[3.0, 0.0], [7.0, 4.0], [11.0, 8.0]],
    "categorical": [1, 0],
    "categorical_axis0": [0, 0, 1],
    "categorical_shape": [[1, 0], [1, 1], [2, 0]],
    "categorical_no_replace": [[1, 3], [0, 0], [3, 2]],
    "poisson": [0, 0, 5, 19, 90, 2017],
    "binomial": [2.0, 18.0, 85.0, 57.0, 19.0, 2.0],
    "multinomial": [1.0, 13.0, 6.0],
    "geometric": [1, 1, 4, 3, 2, 6],
    "rademacher": [-1, -1, 1, 1, -1, 1, 1, -1],
    "triangular": [1.5781798, 1.7301326, 0.49327874, 0.65592885, 0.79071164],
}
CLOSE = {
    "normal": [1.6226422, 2.0252647, -0.43359444, -0.07861735, 0.1760909, -0.97208923],
    "normal_c64": [complex(-1.6817402, -1.3740652), complex(-1.206442, 0.07411618), complex(-0.34746975, -0.033650905)],
    "gumbel": [2.9233725, 3.8326178, -0.09689324, 0.27725708, 0.57569456],
    "gumbel_high": [-1.0818486, -1.3463638, 0.90657884, 0.45828176, 0.16994496],
    "gumbel_highest": [-1.0818492, -1.3463643, 0.9065792, 0.45828202, 0.1699446],
    "exponential": [2.950128, 3.8434246, 0.40390354, 0.6323691, 0.84371126],
    "laplace": [-2.2569816, -3.1502788, 0.40859544, 0.06471242, -0.15056418],
    "logistic": [2.896376, 3.8217716, -0.6978392, -0.12549055, 0.2813971],
    "cauchy": [6.0274944, 14.837895, -0.58172226, -0.09874987, 0.22315963],
    "truncated_normal": [-1.0346209, 2.4761763, -0.17467561],
    "gamma": [0.6292697, 0.7262849, 1.5440423, 14.303314, 1.1215913e-08],
    "loggamma": [-0.46319538, -0.31981286, 0.4344039, 2.6604915, -18.305933],
    "beta": [0.23627362, 0.49045956, 0.6837948, 0.5423442, 0.49023703],
    "dirichlet": [0.10790424, 0.088596374, 0.13772272, 2.6129512e-05, 0.6657506],
    "t": [0.69022465, -3.2393365, -1.6745249, -1.8150756, -0.50429136],
    "chisquare": [2.205084, 2.4899669, 1.4557135, 6.424535, 4.57179],
    "f": [2.5797074, 0.19219677, 0.1597769, 0.38842028, 0.9917945],
    "pareto": [2.6734667, 3.6007476, 1.1441185, 1.2346528, 1.3247676],
    "weibull_min": [4.1139336, 4.9072957, 1.0928195, 1.4734783, 1.7857715],
    "rayleigh": [0.65575665, 0.41620055, 2.9688284, 2.462291, 2.1209698],
    "maxwell": [2.6310966, 0.99103284, 0.9649306, 3.0782752, 1.3358209],
    "double_sided_maxwell": [4.091442, 4.1482553, -3.165061, 5.5848346, 5.2100425],
    "lognormal": [2.2508795, 2.752838, 0.8050932, 0.9614539, 1.0920378],
    "generalized_normal": [1.0603918, 0.08920828, -1.3751338, 0.5591429, 0.6801239],
    "ball": [0.8866067, 0.37965888, 0.011265293, -0.24022324, 0.08836475],
    "ball_p1": [-0.048973575, 0.05591505, 0.23396845, 0.13192669, 0.4352144],
    "wald": [0.46882027, 0.51981795, 0.61785954, 0.3952965, 0.539823],
    "mvn_cholesky": [[3.2947626, 1.3233862, 0.70432776], [0.88881826, -0.844594, -0.13092601]],
    "mvn_eigh": [[1.0162036, 0.62081456, 2.199699], [2.2942169, -0.43422967, 0.6401095]],
    "mvn_svd": [[-0.6592696, -3.3597822, -0.62763107], [1.1576855, -0.9127794, -0.14561927]],
    "orthogonal": [[0.9554101, 0.29413575, 0.025995579],
                   [-0.046289816, 0.23614088, -0.9706156],
                   [-0.29163137, 0.9261326, 0.23922686]],
    "orthogonal_2x4": [[0.9220003, -0.24637239, 0.100056484, -0.28143337],
                       [0.31397533, 0.20442358, -0.7088381, 0.59764475]],
}
TRANSFORMS = {
    "randint": [89, 0, 12],
    "vmap_randint": [[91, 61, 47], [22, 22, 96]],
    "gamma": [2.078842, 2.2727783, 1.5440423, 4.702054, 3.6000705],
    "vmap_gamma": [[0.9106433, 0.008127068, 1.3283532, 0.23130384, 0.24083877],  # alpha 0.5
                   [5.0589304, 0.71969056, 1.165581, 1.790625, 6.918918]],  # alpha 3.0
    "poisson": [0, 1, 5],
    "vmap_poisson": [[1, 5, 4], [3, 3, 5]],
    "permutation": [0, 1, 5, 4, 3, 2],
    "vmap_permutation": [[0, 2, 4, 1, 5, 3], [0, 3, 5, 1, 4, 2]],
    "normal": [1.6226422, 2.0252647, -0.43359444],
    "vmap_normal_typed": [[1.0040143, -0.9063372, -0.7481722], [-2.4424558, -2.0356805, 0.20554423]],
    "vmap_split_typed": [[[790831124, 2766039447], [603487872, 4092817842]],
                         [[1171141403, 3867618381], [3556823455, 1079767805]]],
    "vmap_fold_in": [[696430527, 3370724820], [1483995542, 2640611522], [2609697535, 3092625430]],
    "vmap_seed": [[0, 0], [0, 1], [0, 2]],
    "fori_normal": [5.8226247, -8.359929, -5.0181274],
    "fori_randint_typed": [1915, 1353, 1840],
    "fori_gamma": [3.2490995, 2.9390569, 10.344745, 4.61598, 3.485673],
    "fori_uniform_traced_bound": [2.972723, 6.997058],
}
X64 = {
    "key_seed_2_40": [256, 5],
    "bits": [2179487362436112514, 8370371427069427784, 10487943526538222699],
    # separately rounded mul+add would differ at 4 of 8
    "uniform_range": [-2.0793157311702952, -0.24978252378266663, 6.383604087646568, 0.17840244593916105,
                      1.0476669824259377, 4.003778924533034, -2.019789772818883, -2.0637257659908306],
    "randint": [-643884527857, 205787154559, 30857237199, 999804089301],
    "bernoulli": [True, False, False, True, False, False],
    "normal": [-0.2058421394796434, -0.7847657764467411, 1.8160866726679836, 0.1878440128937887],
}

A3 = np.array([[0.1, 1.0, -0.5], [2.0, 0.0, 0.3]], np.float32)
P5 = np.array([0.1, 0.2, 0.3, 0.15, 0.25], np.float32)
MEAN = np.array([1.0, -1.0, 0.5], np.float32)
COV = np.array([[2.0, 0.3, 0.1], [0.3, 1.0, 0.2], [0.1, 0.2, 0.5]], np.float32)
ALPHAS = np.array([0.3, 1.0, 2.5, 10.0, 0.05], np.float32)

# (name, dtype, draw): the kiln call that gave EXACT[name] in JAX.
EXACT_DRAWS = [
    ("key_data_42", np.uint32, lambda: kr.key_data(kr.key(42))),
    ("split_typed_3", np.uint32, lambda: kr.key_data(kr.split(kr.key(42), 3))),
    ("fold_in_max", np.uint32, lambda: kr.key_data(kr.fold_in(kr.key(42), 2 ** 32 - 1))),
    ("bits_u8", np.uint8, lambda: kr.bits(K(1), (6,), jnp.uint8)),
    ("bits_u16", np.uint16, lambda: kr.bits(K(1), (6,), jnp.uint16)),
    ("uniform_f16", np.float16, lambda: kr.uniform(K(2), (6,), jnp.float16, -3.0, 5.0)),
    ("uniform_bf16", bf16, lambda: kr.uniform(K(2), (6,), jnp.bfloat16, -3.0, 5.0)),
    ("normal_f16", np.float16, lambda: kr.normal(K(3), (6,), jnp.float16)),
    ("normal_bf16", bf16, lambda: kr.normal(K(3), (6,), jnp.bfloat16)),
    ("uniform_range", np.float32, lambda: kr.uniform(K(10), (16,), minval=-3.0, maxval=7.3)),
    ("bernoulli", np.bool_, lambda: kr.bernoulli(K(4), jnp.array([0.1, 0.5, 0.9, 0.3, 0.7, 0.5]))),
    ("bernoulli_high", np.bool_, lambda: kr.bernoulli(K(4), 0.3, (6,), mode="high")),
    ("randint", np.int32, lambda: kr.randint(K(0), (8,), 0, 10)),
    ("randint_neg", np.int32, lambda: kr.randint(K(1), (8,), -100, 37)),
    ("randint_u8_full", np.uint8, lambda: kr.randint(K(1), (8,), 0, 256, jnp.uint8)),
    ("randint_i16", np.int16, lambda: kr.randint(K(1), (8,), -1000, 1000, jnp.int16)),
    ("randint_bounds", np.int32, lambda: kr.randint(K(1), (2, 3), jnp.array([0, 10, 100]), jnp.array([5, 20, 1000]))),
    ("randint_empty_range", np.int32, lambda: kr.randint(K(1), (4,), 5, 5)),
    ("permutation_int", np.int32, lambda: kr.permutation(K(0), 10)),
    ("permutation_axis1", np.int32, lambda: kr.permutation(K(0), jnp.arange(12).reshape(3, 4), axis=1)),
    ("permutation_independent", np.int32,
     lambda: kr.permutation(K(0), jnp.arange(12).reshape(3, 4), axis=1, independent=True)),
    ("permutation_2000_head", np.int32, lambda: kr.permutation(K(5), 2000)[:8]),  # two sort rounds
    ("choice", np.int32, lambda: kr.choice(K(0), 10, (4,))),
    ("choice_no_replace", np.int32, lambda: kr.choice(K(0), 10, (4,), replace=False)),
    ("choice_p", np.int32, lambda: kr.choice(K(0), 5, (6,), p=P5)),
    ("choice_p_no_replace", np.int32, lambda: kr.choice(K(0), 5, (3,), replace=False, p=P5)),
    ("choice_axis1", np.float32, lambda: kr.choice(K(2), jnp.arange(12.0).reshape(3, 4), (2,), axis=1)),
    ("categorical", np.int32, lambda: kr.categorical(K(0), A3)),
    ("categorical_axis0", np.int32, lambda: kr.categorical(K(0), A3, axis=0)),
    ("categorical_shape", np.int32, lambda: kr.categorical(K(0), A3, shape=(3, 2))),
    ("categorical_no_replace", np.int32,
     lambda: kr.categorical(K(0), np.concatenate([A3, A3[:, :1]], 1), shape=(3, 2), replace=False)),
    # lam 0, Knuth (< 10) and the transformed rejection (>= 10) in one draw
    ("poisson", np.int32, lambda: kr.poisson(K(0), jnp.array([0.0, 0.5, 5.0, 15.0, 100.0, 2000.0]))),
    # inversion (n min(p, 1-p) <= 10), BTRS, and p > 1/2 (drawn as n - Binomial(n, 1-p))
    ("binomial", np.float32, lambda: kr.binomial(K(0), jnp.array([5.0, 50.0, 100.0, 1000.0, 20.0, 7.0]),
                                                 jnp.array([0.3, 0.4, 0.8, 0.05, 0.9, 0.5]))),
    ("multinomial", np.float32, lambda: kr.multinomial(K(0), 20.0, jnp.array([0.2, 0.5, 0.3]))),
    ("geometric", np.int32, lambda: kr.geometric(K(0), 0.3, (6,))),
    ("rademacher", np.int32, lambda: kr.rademacher(K(0), (8,))),
    ("triangular", np.float32, lambda: kr.triangular(K(0), 0.0, 0.3, 2.0, (5,))),
]

# (name, max ulps, draw): the kiln call that gave CLOSE[name] in JAX, float32 (complex64 for one).
CLOSE_DRAWS = [
    ("normal", 3, lambda: kr.normal(K(0), (6,))),
    ("normal_c64", 3, lambda: kr.normal(K(3), (3,), jnp.complex64)),
    ("gumbel", 1, lambda: kr.gumbel(K(0), (5,))),
    ("gumbel_high", 1, lambda: kr.gumbel(K(0), (5,), mode="high")),
    ("gumbel_highest", 1, lambda: kr.gumbel(K(0), (5,), mode="highest")),
    ("exponential", 1, lambda: kr.exponential(K(0), (5,))),
    ("laplace", 1, lambda: kr.laplace(K(0), (5,))),
    ("logistic", 1, lambda: kr.logistic(K(0), (5,))),
    ("cauchy", 1, lambda: kr.cauchy(K(0), (5,))),
    ("truncated_normal", 6, lambda: kr.truncated_normal(K(0), jnp.array([-3.0, 0.5, -1.0]),
                                                        jnp.array([-1.0, 4.0, 2.0]))),
    ("gamma", 1, lambda: kr.gamma(K(0), ALPHAS)),
    ("loggamma", 1, lambda: kr.loggamma(K(0), ALPHAS)),
    ("beta", 2, lambda: kr.beta(K(0), 2.0, 3.0, (5,))),
    ("dirichlet", 1, lambda: kr.dirichlet(K(0), jnp.array([0.5, 1.0, 2.0, 0.2, 4.0]))),
    ("t", 3, lambda: kr.t(K(0), 3.0, (5,))),
    ("chisquare", 3, lambda: kr.chisquare(K(0), 3.0, (5,))),
    ("f", 3, lambda: kr.f(K(0), 3.0, 5.0, (5,))),
    ("pareto", 1, lambda: kr.pareto(K(0), 3.0, (5,))),
    ("weibull_min", 1, lambda: kr.weibull_min(K(0), 2.0, 1.5, (5,))),
    ("rayleigh", 1, lambda: kr.rayleigh(K(0), 2.0, (5,))),
    ("maxwell", 4, lambda: kr.maxwell(K(0), (5,))),
    ("double_sided_maxwell", 2, lambda: kr.double_sided_maxwell(K(0), 1.0, 2.0, (5,))),
    ("lognormal", 1, lambda: kr.lognormal(K(0), 0.5, (5,))),
    ("generalized_normal", 1, lambda: kr.generalized_normal(K(0), 1.5, (5,))),
    ("ball", 2, lambda: kr.ball(K(0), 5)),
    ("ball_p1", 1, lambda: kr.ball(K(1), 5, p=1.0)),
    ("wald", 6, lambda: kr.wald(K(0), 1.5, (5,))),
    ("mvn_cholesky", 8, lambda: kr.multivariate_normal(K(0), MEAN, COV, (2,))),
    ("mvn_eigh", 10, lambda: kr.multivariate_normal(K(0), MEAN, COV, (2,), method="eigh")),  # LAPACK's eigenvectors
    ("mvn_svd", 3, lambda: kr.multivariate_normal(K(0), MEAN, COV, (2,), method="svd")),
    # the QR's last bits depend on the LAPACK build (OpenBLAS 0.3.21 of Debian 12: 20 ulps from JAX's)
    ("orthogonal", 32, lambda: kr.orthogonal(K(0), 3)),
    ("orthogonal_2x4", 32, lambda: kr.orthogonal(K(0), 2, m=4)),
]


def _max_ulps(got, want):
    """The largest |got - want| in ulps of each expected value (real and imaginary parts apart)."""
    got, want = np.asarray(got), np.asarray(want)
    if want.dtype.kind == "c":
        return max(_max_ulps(got.real, want.real), _max_ulps(got.imag, want.imag))
    diff = np.abs(got.astype(np.float64) - want.astype(np.float64))
    return float(np.max(diff / np.spacing(np.abs(want)).astype(np.float64), initial=0.0))


def _check_exact(got, want, dtype):
    got = np.asarray(got)
    assert got.dtype == np.dtype(dtype), (got.dtype, dtype)
    np.testing.assert_array_equal(got, np.asarray(want, dtype))


def _check_close(got, want, ulps, dtype=np.float32):
    got, want = np.asarray(got), np.asarray(want, dtype)
    assert got.shape == want.shape and got.dtype == want.dtype, (got.dtype, got.shape, want.dtype, want.shape)
    assert _max_ulps(got, want) <= ulps, f"{_max_ulps(got, want)} ulps apart (allowed {ulps}):\n{got}\n{want}"


@pytest.mark.parametrize("name,dtype,draw", EXACT_DRAWS, ids=[c[0] for c in EXACT_DRAWS])
def test_draws_match_jax_bit_for_bit(name, dtype, draw):
    _check_exact(draw(), EXACT[name], dtype)


@pytest.mark.parametrize("name,ulps,draw", CLOSE_DRAWS, ids=[c[0] for c in CLOSE_DRAWS])
def test_transcendental_draws_match_jax_to_the_ulp(name, ulps, draw):
    # the values are JAX's on the CPU; a GPU's log/exp/pow (libdevice) and its linear algebra
    # (cuSOLVER) round their last bits differently again
    if kiln.devices()[0].platform == "gpu":
        ulps = max(ulps, 16)
        if name == "mvn_eigh":
            # cuSOLVER's eigenvectors may differ from LAPACK's in sign (so would JAX's on a GPU):
            # the draw must be mean + V sqrt(W) z with this device's own V and W
            w, v = (np.asarray(a, np.float64) for a in kiln.numpy.linalg.eigh(COV))
            z = np.asarray(kr.normal(K(0), (2, 3)), np.float64)
            want = MEAN + z @ (v * np.sqrt(w)).T
            np.testing.assert_allclose(np.asarray(draw(), np.float64), want, rtol=1e-5, atol=1e-5)
            return
    _check_close(draw(), CLOSE[name], ulps, np.complex64 if name == "normal_c64" else np.float32)


def test_uniform_range_rounds_as_one_fused_multiply_add():
    # XLA fuses floats * (maxval - minval) + minval into an FMA on the CPU; separate rounding
    # differs from JAX's draw at 5 of these 16 values (see EXACT) — guards kiln.random._fma.
    floats = np.asarray(kr.uniform(K(10), (16,)))
    separate = np.maximum(np.float32(-3), floats * (np.float32(7.3) - np.float32(-3)) + np.float32(-3))
    assert (separate != np.asarray(EXACT["uniform_range"], np.float32)).sum() == 5
    got = kiln.jit(lambda k: kr.uniform(k, (16,), minval=-3.0, maxval=7.3))(K(10))
    _check_exact(got, EXACT["uniform_range"], np.float32)
    # traced bounds take the same path
    got = kiln.jit(lambda k, lo, hi: kr.uniform(k, (16,), minval=lo, maxval=hi))(K(10), -3.0, 7.3)
    _check_exact(got, EXACT["uniform_range"], np.float32)


def test_typed_keys_wrap_the_raw_key_data():
    k = kr.key(42)
    assert isinstance(k, kr.PRNGKeyArray) and k.shape == () and k.ndim == 0 and str(k.dtype) == "key<fry>"
    assert kr.key_impl(k) == "threefry2x32" and kr.key_impl(K(42)) == "threefry2x32"
    np.testing.assert_array_equal(np.asarray(kr.key_data(K(42))), EXACT["key_data_42"])  # raw keys are their data
    # split and fold_in give back the kind of key they got, with the same data either way
    ks = kr.split(k, 3)
    assert isinstance(ks, kr.PRNGKeyArray) and ks.shape == (3,) and len(ks) == 3
    np.testing.assert_array_equal(np.asarray(kr.split(K(42), 3)), EXACT["split_typed_3"])
    np.testing.assert_array_equal(np.asarray(kr.key_data(ks[1])), EXACT["split_typed_3"][1])
    assert [np.asarray(kr.key_data(x)).tolist() for x in ks] == EXACT["split_typed_3"]
    assert ks.reshape(3, 1).shape == (3, 1) and ks[None, ...].shape == (1, 3)
    k2, _ = kr.split(k)
    assert isinstance(k2, kr.PRNGKeyArray) and not isinstance(kr.split(K(42)), kr.PRNGKeyArray)
    np.testing.assert_array_equal(np.asarray(kr.fold_in(K(42), 2 ** 32 - 1)), EXACT["fold_in_max"])
    w = kr.wrap_key_data(kr.key_data(ks))
    assert w.shape == (3,) and bool(jnp.all(w == ks)) and kr.clone(k) is k
    # every sampler takes either kind of key
    for draw in (lambda kk: kr.normal(kk, (3,)), lambda kk: kr.randint(kk, (3,), 0, 9),
                 lambda kk: kr.gamma(kk, 2.0, (5,)), lambda kk: kr.permutation(kk, 5)):
        np.testing.assert_array_equal(np.asarray(draw(kr.key(7))), np.asarray(draw(K(7))))


def test_typed_keys_cross_jit_and_vmap():
    out = kiln.jit(lambda kk: kr.split(kk, 3))(kr.key(42))
    assert isinstance(out, kr.PRNGKeyArray) and out.shape == (3,)
    np.testing.assert_array_equal(np.asarray(kr.key_data(out)), EXACT["split_typed_3"])
    got = kiln.vmap(lambda kk: kr.normal(kk, (3,)))(kr.split(kr.key(0), 2))
    _check_close(got, TRANSFORMS["vmap_normal_typed"], 3)
    got = kiln.vmap(kr.split)(kr.split(kr.key(4), 2))
    assert isinstance(got, kr.PRNGKeyArray) and got.shape == (2, 2)
    np.testing.assert_array_equal(np.asarray(kr.key_data(got)), TRANSFORMS["vmap_split_typed"])
    np.testing.assert_array_equal(np.asarray(kiln.vmap(lambda d: kr.fold_in(K(4), d))(jnp.arange(3))),
                                  TRANSFORMS["vmap_fold_in"])
    np.testing.assert_array_equal(np.asarray(kiln.vmap(kr.PRNGKey)(jnp.arange(3))), TRANSFORMS["vmap_seed"])


# (name, max ulps (None: exact), modes, draw(key, param)): run eagerly and under jit with PRNGKey(0)
# and params[0], and vmapped over split(PRNGKey(0), 2) and params (a batched while loop for gamma
# and poisson; gamma runs jitted inside either way, as in JAX).
TRANSFORMED = [
    ("randint", None, ("eager", "jit", "vmap"), (100, 100), lambda kk, hi: kr.randint(kk, (3,), 0, hi)),
    ("gamma", 5, ("eager", "vmap"), (2.5, 0.5, 3.0), lambda kk, a: kr.gamma(kk, a, (5,))),
    ("poisson", None, ("eager", "vmap"), (4.0, 4.0), lambda kk, lam: kr.poisson(kk, lam, (3,))),
    ("permutation", None, ("eager", "jit", "vmap"), (6, 6), lambda kk, n: kr.permutation(kk, 6)),
]


@pytest.mark.parametrize("name,ulps,modes,params,draw", TRANSFORMED, ids=[c[0] for c in TRANSFORMED])
def test_eager_jit_and_vmap_agree_with_jax(name, ulps, modes, params, draw):
    def check(got, want):
        if ulps is None:
            np.testing.assert_array_equal(np.asarray(got), want)
        else:
            _check_close(got, want, ulps)
    if "eager" in modes:
        check(draw(K(0), params[0]), TRANSFORMS[name])
    if "jit" in modes:
        check(kiln.jit(lambda kk: draw(kk, params[0]))(K(0)), TRANSFORMS[name])
    if "vmap" in modes:
        check(kiln.vmap(draw)(kr.split(K(0), 2), jnp.array(params[-2:])), TRANSFORMS["vmap_" + name])


def test_samplers_inside_fori_loop():
    def normal_body(i, c):
        k, acc = c
        k, sub = kr.split(k)
        return k, acc + kr.normal(sub, (3,)) * i

    def randint_body(i, c):
        k, acc = c
        k, sub = kr.split(k)
        return k, acc + kr.randint(sub, (3,), 0, 1000)

    def uniform_loop(n):
        def body(i, c):
            k, acc = c
            k, sub = kr.split(k)
            return k, acc + kr.uniform(sub, (2,), minval=-1.0, maxval=2.5)
        return lax.fori_loop(0, n, body, (K(9), jnp.zeros(2)))[1]

    _check_close(lax.fori_loop(0, 4, normal_body, (K(7), jnp.zeros(3)))[1], TRANSFORMS["fori_normal"], 2)
    got = kiln.jit(lambda: lax.fori_loop(0, 4, randint_body, (kr.key(7), jnp.zeros(3, jnp.int32)))[1])()
    np.testing.assert_array_equal(np.asarray(got), TRANSFORMS["fori_randint_typed"])
    got = lax.fori_loop(0, 3, lambda i, acc: acc + kr.gamma(kr.fold_in(K(5), i), 1.5, (5,)), jnp.zeros(5))
    _check_close(got, TRANSFORMS["fori_gamma"], 2)
    got = kiln.jit(uniform_loop)(jnp.int32(5))  # traced trip count: a while loop
    _check_close(got, TRANSFORMS["fori_uniform_traced_bound"], 0)


def test_default_dtypes_and_draws_under_x64(x64):
    np.testing.assert_array_equal(np.asarray(K(2 ** 40 + 5)), X64["key_seed_2_40"])
    b = kr.bits(K(1), (3,))
    assert b.dtype == np.uint64
    np.testing.assert_array_equal(np.asarray(b), np.array(X64["bits"], np.uint64))
    _check_exact(kr.uniform(K(10), (8,), minval=-3.0, maxval=7.3), X64["uniform_range"], np.float64)  # FMA in f64
    _check_exact(kr.randint(K(0), (4,), -2 ** 40, 2 ** 40), X64["randint"], np.int64)
    assert kiln.eval_shape(lambda: kr.poisson(K(0), 3.0, (2,))).dtype == np.int64
    _check_exact(kr.bernoulli(K(4), 0.3, (6,)), X64["bernoulli"], np.bool_)  # p a float64 draw
    _check_close(kr.normal(K(0), (4,)), X64["normal"], 3, np.float64)


def test_draws_keep_their_laws():
    # value-level checks that the pinned draws above could miss: ranges, orthogonality, sums
    o = np.asarray(kr.orthogonal(K(3), 4, (2,)))
    np.testing.assert_allclose(o @ o.transpose(0, 2, 1), np.broadcast_to(np.eye(4), (2, 4, 4)), atol=1e-5)
    d = np.asarray(kr.dirichlet(K(4), jnp.array([0.5, 1.0, 2.0, 0.2, 4.0])))
    assert abs(d.sum() - 1) < 1e-6 and (d >= 0).all()
    t = np.asarray(kr.truncated_normal(K(5), 0.0, 1e-6, (6,)))
    assert (t > 0).all() and (t < 1e-6).all()
    p = np.asarray(kr.permutation(K(6), 50))
    assert sorted(p.tolist()) == list(range(50))
    c = np.asarray(kr.choice(K(7), 6, (6,), replace=False))
    assert sorted(c.tolist()) == list(range(6))


def test_errors_name_the_function():
    with pytest.raises(ValueError, match="single key"):
        kr.normal(kr.split(K(0)), (2,))
    with pytest.raises(TypeError, match="split"):
        kr.split(jnp.ones(2))
    with pytest.raises(OverflowError, match="fold_in"):
        kr.fold_in(K(0), -1)
    with pytest.raises(ValueError, match="uniform"):
        kr.uniform(K(0), (2,), jnp.int32)
    with pytest.raises(ValueError, match="bits"):
        kr.bits(K(0), (2,), jnp.int32)
    with pytest.raises(TypeError, match="randint"):
        kr.randint(K(0), (2,), 0, 5, jnp.float32)
    with pytest.raises(ValueError, match="population"):
        kr.choice(K(0), 3, (4,), replace=False)
    with pytest.raises(ValueError, match="broadcast"):
        kr.pareto(K(0), jnp.ones(3), (2,))
    with pytest.raises(ValueError, match="method"):
        kr.multivariate_normal(K(0), MEAN, COV, method="qr")




def test_gamma_family_gradients_are_jax_s():
    # jax.grad(lambda a: jr.gamma(jr.PRNGKey(0), a, (3,)).sum())(2.0) and the same for loggamma and
    # beta(a, 3.0), from JAX 0.10.2 on the CPU: d sample / d alpha at the sample's quantile
    # (lax.random_gamma_grad), not the derivative of the rejection loop
    key = kr.PRNGKey(0)
    assert float(kiln.grad(lambda a: kr.gamma(key, a, (3,)).sum())(2.0)) == pytest.approx(2.7869484, rel=2e-6)
    assert float(kiln.grad(lambda a: kr.loggamma(key, a, (3,)).sum())(2.0)) == pytest.approx(1.8973668, rel=2e-6)
    assert float(kiln.grad(lambda a: kr.beta(key, a, 3.0, (3,)).sum())(2.0)) == pytest.approx(0.4338452, rel=2e-6)


def test_permutation_sorts_carry_a_hint_make_jaxpr_does_not_print():
    """permutation's sorts say their keys are random (a hint the GPU sort uses); the program text
    is JAX's sort all the same, and its result is a stable sort by those keys."""
    text = str(kiln.make_jaxpr(lambda k: kr.permutation(k, 9))(kr.PRNGKey(1)))
    assert "sort[dimension=0 num_keys=1]" in text and "random" not in text
    keys = np.random.default_rng(5).integers(0, 4, 50).astype(np.uint32)  # many ties: stability shows
    vals = np.arange(50, dtype=np.int32)
    sk, sv = kiln.jit(lambda a, b: lax._sort_key_val_random(a, b, 0))(keys, vals)
    order = np.argsort(keys, kind="stable")
    np.testing.assert_array_equal(np.asarray(sk), keys[order])
    np.testing.assert_array_equal(np.asarray(sv), vals[order])


def test_multivariate_normal_under_rank_promotion_raise():
    """Issue 33 (diffrax's tests run with jax_numpy_rank_promotion='raise'): a batch of samples
    from a mean of lower rank broadcasts explicitly inside the sampler (it raised)."""
    import kiln
    rng = np.random.default_rng()
    mean = rng.standard_normal(3).astype(np.float32)
    a = rng.standard_normal((3, 3))
    cov = (a @ a.T + 3 * np.eye(3)).astype(np.float32)
    key = kiln.random.key(int(rng.integers(1 << 30)))
    with kiln.numpy_rank_promotion("raise"):
        x = kiln.random.multivariate_normal(key, mean, cov, shape=(1, 2))
    assert x.shape == (1, 2, 3)
    y = kiln.random.multivariate_normal(key, mean, cov, shape=(1, 2))
    np.testing.assert_array_equal(x, y)
