"""NumPy's names and functions in map expressions, against NumPy itself
(issue 28), through a real tesseld (conftest.py's session daemon).

1. `//`, floor_divide, `%`, sign, isnan, isinf, isfinite, signbit, copysign,
   nextafter, minimum, maximum and ones_like give NumPy's bits — the sign of
   a zero included, NaN where NumPy has NaN — in float64 and float32 on the
   serial and cpu backends, over every pair of a grid of special values (±0,
   ±inf, NaN, subnormals, the largest finite values, values that round) and
   random pairs across the exponent range (the GPU run of
   tests/gpu/test_map_bits.c proves cuda = cpu on the same kind of inputs).
   NumPy's spellings (arcsin ... arctanh, absolute, power, rint, ...) give
   the C names' bits.
2. numexpr's own test table (numexpr/tests/test_numexpr.py's `tests`: 128
   constructs; Debian's python3-numexpr, a test dependency) evaluated on its
   own float64 inputs: every construct either matches NumPy's value or is
   one of the documented exceptions below, which api/API.md lists with the
   same reasons. A construct newly accepted or newly refused fails the test
   until the list (and API.md) say so.
"""
import re

import numpy as np
import pytest

import tessel

GRID = [0.0, -0.0, 1.0, -1.0, 0.5, -0.5, 1.5, -2.5, 3.0, -7.0, 0.1, 0.3,
        -0.3, 1.0 / 3, 5e-324, -5e-324, 2.2250738585072014e-308, 1e-300,
        1e300, -1e308, 1.7976931348623157e308, 4503599627370497.0,
        16777217.0, 1e16, np.inf, -np.inf, np.nan]


def _inputs(dtype):
    g = np.array(GRID)
    a, b = np.meshgrid(g, g)
    rng = np.random.default_rng(28)
    n = 4000
    ra = rng.uniform(1, 2, n) * 2.0 ** rng.integers(-60, 60, n) * rng.choice([-1, 1], n)
    rb = rng.uniform(1, 2, n) * 2.0 ** rng.integers(-60, 60, n) * rng.choice([-1, 1], n)
    # quotients near integers, where floor division's rounding matters
    k = rng.integers(-1000, 1000, n).astype(float)
    rc = rng.uniform(-10, 10, n)
    rd = (k * rc) * (1 + rng.uniform(-4e-16, 4e-16, n))
    with np.errstate(over="ignore"):  # float32: the largest values become inf
        x = np.concatenate([a.ravel(), ra, rd]).astype(dtype)
        y = np.concatenate([b.ravel(), rb, rc]).astype(dtype)
    return x, y


def _same_bits(got, want):
    assert got.dtype == want.dtype and got.shape == want.shape
    nan = np.isnan(want)
    bad = (np.isnan(got) != nan) | (~nan & (got.view(f"u{got.itemsize}") !=
                                            want.view(f"u{want.itemsize}")))
    return np.flatnonzero(bad)


FUNCS = [
    ("x // y", np.floor_divide), ("floor_divide(x, y)", np.floor_divide),
    ("x % y", np.remainder), ("sign(x)", np.sign), ("isnan(x)", np.isnan),
    ("isinf(x)", np.isinf), ("isfinite(x)", np.isfinite),
    ("signbit(x)", np.signbit), ("copysign(x, y)", np.copysign),
    ("nextafter(x, y)", np.nextafter), ("minimum(x, y)", np.minimum),
    ("maximum(x, y)", np.maximum), ("ones_like(x)", np.ones_like),
]


@pytest.mark.parametrize("dtype", ["float64", "float32"])
@pytest.mark.parametrize("backend", ["serial", "cpu"])
def test_functions_give_numpys_bits(client, dtype, backend):
    x, y = _inputs(dtype)
    for src, fn in FUNCS:
        ins = {"x": x, "y": y} if "y" in src else {"x": x}
        got = client.map(src, backend=backend, dtype=dtype, **ins)
        with np.errstate(all="ignore"):
            want = (fn(x, y) if "y" in src else fn(x)).astype(dtype)
        bad = _same_bits(np.asarray(got, dtype=dtype), want)
        assert bad.size == 0, (
            f"{src} {dtype} {backend}: {bad.size} differ from NumPy, first at "
            f"x={x[bad[0]]!r} y={y[bad[0]]!r}: tessel {got[bad[0]]!r} "
            f"numpy {want[bad[0]]!r}")


def test_numpy_spellings_are_the_c_functions(client):
    x, y = _inputs("float64")
    xs = np.clip(np.nan_to_num(x), -1, 1)
    pairs = [("arcsin(x)", "asin(x)"), ("arccos(x)", "acos(x)"),
             ("arctan(x)", "atan(x)"), ("arctan2(x, y)", "atan2(x, y)"),
             ("arcsinh(x)", "asinh(x)"), ("arccosh(1 + abs(x))", "acosh(1 + abs(x))"),
             ("arctanh(x)", "atanh(x)"), ("absolute(x)", "abs(x)"),
             ("power(x, y)", "pow(x, y)"), ("rint(x)", "round(x)"),
             ("remainder(x, y)", "x % y"), ("copy(x) + conj(y)", "x + y")]
    for numpy_name, c_name in pairs:
        ins = {"x": xs, "y": y} if "y" in c_name else {"x": xs}
        a = client.map(numpy_name, backend="cpu", dtype="float64", **ins)
        b = client.map(c_name, backend="cpu", dtype="float64", **ins)
        assert _same_bits(a, b).size == 0, numpy_name


# ---- numexpr's test table --------------------------------------------------

# Constructs of numexpr's table that Tessel does not evaluate as NumPy does,
# and why (api/API.md, "map", says the same).
EXCEPTIONS = {
    "where((a-10).real != 0.0, a, 2)":
        "refused: attributes (.real) belong to complex numbers, which Tessel has not",
    "b*c+d*e": "differs: `e` is Euler's number in Tessel, not an input",
}


def _numexpr_table():
    nt = pytest.importorskip("numexpr.tests.test_numexpr")
    out = []
    for _section, exprs in nt.tests:
        out.extend(exprs)
    return out


def _numexpr_inputs():
    n = 100
    return {"a": np.arange(2 * n, dtype=float)[::2], "a2": np.zeros((n, n)),
            "b": np.arange(n, dtype=float) / n, "c": np.arange(n, dtype=float),
            "d": np.arange(n, dtype=float), "e": np.arange(n, dtype=float)}


def _tessel_value(client, src, data):
    # Tessel's `e` is the constant: never an input
    names = [m for m in dict.fromkeys(re.findall(r"[A-Za-z_]\w*(?!\s*\()", src))
             if m in data and m != "e"]
    return client.map(src, backend="cpu", dtype="float64",
                      **{k: data[k] for k in names})


def test_numexpr_table(client):
    table = _numexpr_table()
    assert len(table) == 128, "numexpr's table changed: review EXCEPTIONS"
    data = _numexpr_inputs()
    env = dict(vars(np))
    refused, differ = {}, {}
    for src in table:
        with np.errstate(all="ignore"):
            want = np.asarray(eval(src, env, dict(data)), dtype=float)
        try:
            got = _tessel_value(client, src, data)
        except tessel.InvalidArgument as ex:
            refused[src] = str(ex)
            continue
        want = np.broadcast_to(want, np.shape(got))
        if not np.allclose(got, want, rtol=1e-14, atol=0, equal_nan=True):
            differ[src] = (got, want)
    print(f"numexpr's table: {len(table)} constructs, {len(refused)} refused, "
          f"{len(differ)} differ")
    for src, why in refused.items():
        print(f"  refused {src!r}: {why}")
    unexplained = sorted((set(refused) | set(differ)) - set(EXCEPTIONS))
    assert not unexplained, f"refused or different from NumPy: {unexplained}"
    for src, why in EXCEPTIONS.items():
        kind = why.split(":")[0]
        assert src in (refused if kind == "refused" else differ), \
            f"{src!r} is no longer an exception: update EXCEPTIONS and API.md"
