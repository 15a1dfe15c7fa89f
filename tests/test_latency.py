"""kvlab/latency/model.py: the tier of each simulator answer, the per-tier fits (median, or least-squares line) and
their residuals, whole-tier and mixed predictions, and the description round trip."""

import json
import statistics
from fractions import Fraction

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from kvlab.latency.model import TIERS, LatencyModel, TierFit, tier_of

FEW = settings(max_examples=60, deadline=None, database=None)
SOME = settings(max_examples=150, deadline=None, database=None)

# Milliseconds with 2 decimals, tokens as whole numbers: exact as Fractions, as a measurement writes them.
MS = st.integers(0, 200_000).map(lambda cents: cents / 100)
TOKENS = st.integers(1, 100_000)
INTERCEPT = st.integers(0, 1_000_000).map(lambda milli: milli / 1000)  # 3 decimals: what describe() keeps
SLOPE = st.integers(0, 500_000).map(lambda micro: micro / 1_000_000)  # 6 decimals


def fit_of(intercept, slope, n=1):
    return TierFit(n, intercept, slope, 0.0, 0.0)


@st.composite
def models(draw, ordered=False):
    """A model with all four tiers, each a line; ``ordered``: gpu_hit <= cpu_load <= recompute(_offload) at every
    length (intercepts and slopes both ordered)."""
    intercepts = [draw(INTERCEPT) for _ in TIERS]
    slopes = [draw(SLOPE) for _ in TIERS]
    if ordered:
        intercepts[:3], slopes[:3] = sorted(intercepts[:3]), sorted(slopes[:3])
        intercepts[3], slopes[3] = intercepts[2] + draw(INTERCEPT), slopes[2] + draw(SLOPE)
    return LatencyModel({tier: fit_of(i, s) for tier, i, s in zip(TIERS, intercepts, slopes, strict=True)})


def exact_time(fit, tokens):
    return Fraction(fit.intercept_ms) + Fraction(fit.ms_per_token) * tokens


# --------------------------------------------------------------------------------------------
# Tiers
# --------------------------------------------------------------------------------------------


def test_the_four_tiers_in_order():
    assert TIERS == ("gpu_hit", "cpu_load", "recompute", "recompute_offload")


@pytest.mark.parametrize(
    ("access", "has_cpu", "tier"),
    [
        ("gpu", False, "gpu_hit"),
        ("gpu", True, "gpu_hit"),
        ("cpu", False, "cpu_load"),
        ("cpu", True, "cpu_load"),
        ("miss", False, "recompute"),
        ("miss", True, "recompute_offload"),  # write-through: the computed KV is also stored on the CPU
    ],
)
def test_tier_of_each_simulator_answer(access, has_cpu, tier):
    assert tier_of(access, has_cpu) == tier


# --------------------------------------------------------------------------------------------
# TierFit
# --------------------------------------------------------------------------------------------


def test_median_fit_hand_example():
    """Equal lengths: the median (of an even count, the mean of the middle two); residuals about it."""
    fit = TierFit.fit([100, 100, 100, 100], [1.0, 5.0, 2.0, 10.0])
    assert fit == TierFit(n=4, intercept_ms=3.5, ms_per_token=0.0, residual_median_abs_ms=2.0, residual_max_abs_ms=6.5)
    assert fit.predict(100) == fit.predict(7) == 3.5  # a median does not depend on the length


def test_median_fit_odd_count_and_single_request():
    assert TierFit.fit([9, 9, 9], [3.0, 1.0, 2.0]) == TierFit(3, 2.0, 0.0, 1.0, 1.0)
    assert TierFit.fit([5011], [606.25]) == TierFit(1, 606.25, 0.0, 0.0, 0.0)


def test_line_fit_hand_example():
    """Tokens 1..4, TTFT 2,4,7,8: Sxy/Sxx = 10.5/5 = 2.1 ms/token through (2.5, 5.25), so intercept 0; residuals
    0.1, 0.2, 0.7, 0.4: median 0.3, max 0.7."""
    fit = TierFit.fit([1, 2, 3, 4], [2.0, 4.0, 7.0, 8.0])
    assert fit.n == 4
    assert fit.ms_per_token == pytest.approx(2.1, abs=1e-12)
    assert fit.intercept_ms == pytest.approx(0.0, abs=1e-12)
    assert fit.residual_median_abs_ms == pytest.approx(0.3, abs=1e-12)
    assert fit.residual_max_abs_ms == pytest.approx(0.7, abs=1e-12)
    assert fit.predict(10) == pytest.approx(21.0, abs=1e-10)
    assert fit.describe() == {
        "n": 4,
        "intercept_ms": 0.0,
        "ms_per_token": 2.1,
        "residual_median_abs_ms": 0.3,
        "residual_max_abs_ms": 0.7,
    }


@SOME
@given(
    intercept=INTERCEPT,
    slope=SLOPE,
    tokens=st.lists(TOKENS, min_size=2, max_size=30).filter(lambda t: len(set(t)) > 1),
)
def test_line_fit_recovers_a_noise_free_line(intercept, slope, tokens):
    """Lengths that vary and no noise: the least-squares line is the line itself (to the digits kept)."""
    ttft = [intercept + slope * t for t in tokens]
    fit = TierFit.fit(tokens, ttft)
    scale = max(ttft) + 1
    assert fit.n == len(tokens)
    assert fit.intercept_ms == pytest.approx(intercept, abs=1e-9 * scale)
    assert fit.ms_per_token == pytest.approx(slope, abs=1e-9 * scale / max(tokens))
    assert fit.residual_max_abs_ms <= 1e-9 * scale
    described = fit.describe()
    assert (described["intercept_ms"], described["ms_per_token"]) == (intercept, slope)
    assert described["residual_median_abs_ms"] == described["residual_max_abs_ms"] == 0.0


@SOME
@given(data=st.lists(st.tuples(TOKENS, MS), min_size=2, max_size=30).filter(lambda d: len({t for t, _ in d}) > 1))
def test_line_fit_is_the_least_squares_line(data):
    """Against the closed form in exact arithmetic: slope Sxy/Sxx, through the means; residuals of that line."""
    tokens, ttft = [t for t, _ in data], [y for _, y in data]
    xs, ys = [Fraction(t) for t in tokens], [Fraction(y) for y in ttft]
    mx, my = sum(xs) / len(xs), sum(ys) / len(ys)
    slope = sum((x - mx) * (y - my) for x, y in zip(xs, ys, strict=True)) / sum((x - mx) ** 2 for x in xs)
    intercept = my - slope * mx
    residuals = [abs(y - intercept - slope * x) for x, y in zip(xs, ys, strict=True)]
    fit = TierFit.fit(tokens, ttft)
    scale = float(max(ys)) + 1  # floating point's error grows with the values' size (an ill-conditioned line:
    # lengths a token apart make a steep slope and a far intercept), so each bound has a relative part too
    assert fit.ms_per_token == pytest.approx(float(slope), abs=1e-7 * (scale / max(tokens) + abs(float(slope))))
    assert fit.intercept_ms == pytest.approx(float(intercept), abs=1e-7 * (scale + abs(float(intercept))))
    far = 1e-7 * (scale + abs(float(intercept)))
    assert fit.residual_median_abs_ms == pytest.approx(float(statistics.median(residuals)), abs=far)
    assert fit.residual_max_abs_ms == pytest.approx(float(max(residuals)), abs=far)


@SOME
@given(length=TOKENS, ttft=st.lists(MS, min_size=1, max_size=25))
def test_equal_lengths_fit_the_median(length, ttft):
    median = statistics.median(ttft)
    residuals = [abs(y - median) for y in ttft]
    assert TierFit.fit([length] * len(ttft), ttft) == TierFit(
        len(ttft), median, 0.0, statistics.median(residuals), max(residuals)
    )


# --------------------------------------------------------------------------------------------
# LatencyModel: fit, predict
# --------------------------------------------------------------------------------------------


@FEW
@given(samples=st.lists(st.tuples(st.sampled_from(TIERS), st.integers(1, 5), MS), max_size=40))
def test_model_fits_each_tier_on_its_own_requests(samples):
    model = LatencyModel.fit(samples)
    present = [tier for tier in TIERS if any(s[0] == tier for s in samples)]
    assert list(model.describe()) == present  # tiers without a request have no fit; the order is TIERS'
    for tier in present:
        mine = [s for s in samples if s[0] == tier]
        assert model.fits[tier] == TierFit.fit([s[1] for s in mine], [s[2] for s in mine])
    for tier in set(TIERS) - set(present):
        with pytest.raises(ValueError, match=tier):
            model.predict(tier, 10)


def test_fit_accepts_a_generator_and_keeps_tiers_apart():
    samples = (s for s in [("cpu_load", 10, 48.0), ("gpu_hit", 10, 30.0), ("cpu_load", 10, 50.0)])
    model = LatencyModel.fit(samples)
    assert model.predict("gpu_hit", 10) == 30.0
    assert model.predict("cpu_load", 10) == 49.0
    assert model.fits["cpu_load"].n == 2


def missing_tier_parts(missing, fitted):
    """What the error of a tier the model lacks says: the tier, the tiers it has, and what to do instead (measure
    a setting that serves it, or price from the hardware), not "to fit" it."""
    return [
        f"this model has no {missing} time",
        f"its measurement had no {missing} request (it has {', '.join(fitted) or 'none'})",
        "measure a setting that serves some",
        "or price from the hardware (--gpu-system; kvlab ttft predict)",
    ]


def check_missing_tier(raised, missing, fitted):
    message = str(raised.value)
    for part in missing_tier_parts(missing, fitted):
        assert part in message, message
    assert "to fit" not in message and "\n" not in message, message


@pytest.mark.parametrize("missing", TIERS)
def test_predict_names_the_tier_the_measurement_lacks(missing):
    model = LatencyModel.fit([(tier, 100, 10.0 * i + 1) for i, tier in enumerate(TIERS) if tier != missing])
    with pytest.raises(ValueError, match=f"no {missing} request") as raised:
        model.predict(missing, 100)
    check_missing_tier(raised, missing, [tier for tier in TIERS if tier != missing])
    for i, tier in enumerate(TIERS):
        if tier != missing:
            assert model.predict(tier, 100) == 10.0 * i + 1


# --------------------------------------------------------------------------------------------
# predict_mix
# --------------------------------------------------------------------------------------------


def test_mix_of_no_tokens_is_zero_even_without_fits():
    assert LatencyModel({}).predict_mix(0, 0, 0, True) == 0.0
    assert LatencyModel({}).predict_mix(0, 0, 0, False) == 0.0


@SOME
@given(model=models(), tokens=TOKENS, has_cpu=st.booleans())
def test_whole_tier_requests_equal_predict(model, tokens, has_cpu):
    recompute = "recompute_offload" if has_cpu else "recompute"
    assert model.predict_mix(tokens, tokens, 0, has_cpu) == model.predict("gpu_hit", tokens)
    assert model.predict_mix(tokens, 0, tokens, has_cpu) == model.predict("cpu_load", tokens)
    assert model.predict_mix(tokens, 0, 0, has_cpu) == model.predict(recompute, tokens)


def test_half_loaded_half_recomputed_is_half_of_each():
    model = LatencyModel(
        {"gpu_hit": fit_of(30.0, 0.0), "cpu_load": fit_of(50.0, 0.0), "recompute": fit_of(500.0, 0.1)}
        | {"recompute_offload": fit_of(600.0, 0.1)}
    )
    assert model.predict_mix(1000, 0, 500, False) == pytest.approx(0.5 * 50 + 0.5 * 600)
    assert model.predict_mix(1000, 0, 500, True) == pytest.approx(0.5 * 50 + 0.5 * 700)
    assert model.predict_mix(1000, 250, 250, True) == pytest.approx(0.25 * 30 + 0.25 * 50 + 0.5 * 700)


@SOME
@given(model=models(), data=st.data(), has_cpu=st.booleans())
def test_mix_is_the_token_weighted_mean_of_the_tiers_times(model, data, has_cpu):
    tokens = data.draw(TOKENS)
    gpu = data.draw(st.integers(0, tokens))
    cpu = data.draw(st.integers(0, tokens - gpu))
    fits = model.fits
    recompute = fits["recompute_offload" if has_cpu else "recompute"]
    expected = (
        gpu * exact_time(fits["gpu_hit"], tokens)
        + cpu * exact_time(fits["cpu_load"], tokens)
        + (tokens - gpu - cpu) * exact_time(recompute, tokens)
    ) / tokens
    assert model.predict_mix(tokens, gpu, cpu, has_cpu) == pytest.approx(float(expected), rel=1e-12, abs=1e-9)


@SOME
@given(model=models(ordered=True), data=st.data(), has_cpu=st.booleans())
def test_mix_shrinks_as_faster_tiers_serve_more(model, data, has_cpu):
    """Tier times ordered gpu <= cpu <= recompute at every length: a token moved to a faster tier never adds time,
    and the mix stays between the fastest and the slowest whole-tier times."""
    tokens = data.draw(st.integers(1, 20_000))
    gpu = data.draw(st.integers(0, tokens))
    cpu = data.draw(st.integers(0, tokens - gpu))
    mix = model.predict_mix(tokens, gpu, cpu, has_cpu)
    eps = 1e-9 * (1 + abs(mix))
    computed = tokens - gpu - cpu
    if computed:
        assert model.predict_mix(tokens, gpu, cpu + 1, has_cpu) <= mix + eps  # a recompute becomes a load
        assert model.predict_mix(tokens, gpu + 1, cpu, has_cpu) <= mix + eps  # a recompute becomes a hit
    if cpu:
        assert model.predict_mix(tokens, gpu + 1, cpu - 1, has_cpu) <= mix + eps  # a load becomes a hit
    slowest = model.predict("recompute_offload" if has_cpu else "recompute", tokens)
    assert model.predict("gpu_hit", tokens) - eps <= mix <= slowest + eps


def test_mix_needs_only_the_tiers_that_serve():
    model = LatencyModel({"gpu_hit": fit_of(30.0, 0.0)})
    assert model.predict_mix(512, 512, 0, True) == 30.0
    with pytest.raises(ValueError, match="recompute_offload") as raised:
        model.predict_mix(512, 511, 0, True)
    check_missing_tier(raised, "recompute_offload", ["gpu_hit"])
    with pytest.raises(ValueError, match="no recompute request") as raised:
        model.predict_mix(512, 511, 0, False)
    check_missing_tier(raised, "recompute", ["gpu_hit"])
    with pytest.raises(ValueError, match="cpu_load") as raised:
        model.predict_mix(512, 500, 12, True)
    check_missing_tier(raised, "cpu_load", ["gpu_hit"])


def test_a_model_without_any_tier_says_it_has_none():
    with pytest.raises(ValueError) as raised:
        LatencyModel({}).predict("gpu_hit", 1)
    check_missing_tier(raised, "gpu_hit", [])


# --------------------------------------------------------------------------------------------
# describe / from_description
# --------------------------------------------------------------------------------------------


@FEW
@given(samples=st.lists(st.tuples(st.sampled_from(TIERS), TOKENS, MS), min_size=1, max_size=40))
def test_description_round_trip(samples):
    """describe() rounds (3 decimals for the intercept, 6 for the slope, 2 for residuals); the model read back from
    it (through JSON, as the pipeline hands it on) describes itself the same and predicts with the rounded line."""
    model = LatencyModel.fit(samples)
    description = model.describe()
    for tier, fit in description.items():
        original = model.fits[tier]
        assert list(fit) == ["n", "intercept_ms", "ms_per_token", "residual_median_abs_ms", "residual_max_abs_ms"]
        assert fit["n"] == original.n
        assert fit["intercept_ms"] == round(original.intercept_ms, 3)
        assert fit["ms_per_token"] == round(original.ms_per_token, 6)
        assert fit["residual_median_abs_ms"] == round(original.residual_median_abs_ms, 2)
        assert fit["residual_max_abs_ms"] == round(original.residual_max_abs_ms, 2)
    back = LatencyModel.from_description(json.loads(json.dumps(description)))
    assert back.describe() == description
    for tier, fit in description.items():
        for tokens in (1, 5011, 100_000):
            assert back.predict(tier, tokens) == fit["intercept_ms"] + fit["ms_per_token"] * tokens
