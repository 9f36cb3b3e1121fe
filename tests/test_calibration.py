"""Calibration oracles: every expected range is recomputed here with numpy (degenerate
histograms C11, non-finite values C12, an activation's own range C09); the calibration
cache follows the graph (C17)."""

import json

import numpy as np
import pytest
import torch
from fieldcases import SMALL_MODELS
from helpers import quantize_tiny, randn
from torch import nn

from qbench.calibration import make_collector
from qbench.calibration.histogram import NUM_BINS, AbsHistogram
from qbench.calibration.kl import kl_threshold

RNG = np.random.default_rng(1234)
UNIFORM = RNG.uniform(-3.0, 5.0, 100_000)
GAUSS = RNG.standard_normal(200_000)
RELU_OUTLIERS = np.concatenate([np.maximum(RNG.standard_normal(100_000), 0), [40.0, 55.0]])


def collect(mode, x, batches=1, **params):
    c = make_collector(mode, **params)
    for i, part in enumerate(np.array_split(x, batches)):
        c.update(part, batch=i)
    return c


@pytest.mark.parametrize("x", [UNIFORM, GAUSS, RELU_OUTLIERS], ids=["uniform", "gauss", "relu"])
def test_max_is_numpy_min_max(x):
    r = collect("max", x, batches=7).compute_range()
    assert (r.lo, r.hi) == (x.min(), x.max())


@pytest.mark.parametrize("p", [99.0, 99.9, 99.999])
@pytest.mark.parametrize("x", [UNIFORM, GAUSS, RELU_OUTLIERS], ids=["uniform", "gauss", "relu"])
def test_percentile_matches_numpy_within_one_bin(x, p):
    c = collect("percentile", x, batches=5, percentile=p)
    r = c.compute_range()
    expected = np.percentile(np.abs(x), p, method="inverted_cdf")  # the sample at the CDF step
    threshold = max(r.hi, -r.lo)  # the clip t, seen on whichever side reaches it
    assert abs(threshold - expected) <= c.hist.bin_width + 1e-12
    assert (r.lo, r.hi) == (max(x.min(), -threshold), min(x.max(), threshold))


def test_percentile_clips_relu_outliers():
    r = collect("percentile", RELU_OUTLIERS, percentile=99.99).compute_range()
    assert r.lo == 0.0 and 3.0 < r.hi < 5.0  # the outliers 40 and 55 are clipped


def test_kl_gaussian_threshold_between_3_and_4_5_sigma():
    r = collect("kl_divergence", GAUSS, batches=10).compute_range()
    assert 3.0 <= r.hi <= 4.5
    assert r.hi < np.abs(GAUSS).max()


def test_kl_clips_relu_outliers_but_keeps_the_bulk():
    r = collect("kl_divergence", RELU_OUTLIERS).compute_range()
    assert r.lo == 0.0
    assert np.mean(RELU_OUTLIERS <= r.hi) > 0.99 and r.hi < 40.0


def test_kl_uses_255_levels_for_non_negative_data_and_128_for_signed():
    from test_kl import reference_threshold

    for x, levels in ((RELU_OUTLIERS, 255), (GAUSS, 128)):
        c = collect("kl_divergence", x)
        expected = reference_threshold(c.hist.counts, c.hist.bin_width, levels)
        other = reference_threshold(c.hist.counts, c.hist.bin_width, 383 - levels)
        assert expected != other  # the level count decides the threshold here
        assert c.compute_range().hi == min(expected, np.abs(x).max())


def test_global_scale_fixed_range():
    assert (
        collect("global_scale", GAUSS).compute_range().lo,
        collect("global_scale", GAUSS).compute_range().hi,
    ) == (-8.0, 8.0)
    r = collect("global_scale", RELU_OUTLIERS, global_scale=4.0).compute_range()
    assert (r.lo, r.hi) == (0.0, 4.0)


@pytest.mark.parametrize("mode", ["max", "percentile", "kl_divergence", "global_scale"])
def test_streaming_equals_one_batch(mode):
    # Batches grow in magnitude so that the histogram range doubles several times.
    x = np.concatenate([RNG.standard_normal(20_000) * s for s in (0.01, 1.0, 30.0, 700.0)])
    one = collect(mode, x, batches=1).compute_range()
    many = collect(mode, x, batches=13).compute_range()
    assert (one.lo, one.hi) == (many.lo, many.hi)


def test_histogram_bins_match_numpy_after_growth():
    x = np.concatenate([RNG.uniform(0, 0.3, 5000), RNG.uniform(-9, 9, 5000)])
    h = AbsHistogram()
    for part in np.array_split(x, 9):
        h.update(part)
    assert h.top == 16.0  # smallest power of two strictly above max |x| (< 9)
    expected = np.histogram(np.abs(x), bins=NUM_BINS, range=(0, 16.0))[0]
    assert np.array_equal(h.counts_with_zeros(), expected)


def test_histogram_memory_does_not_grow():
    h = AbsHistogram()
    for _ in range(50):
        h.update(RNG.standard_normal(1000))
    assert h.counts.shape == (NUM_BINS,)


def test_kl_threshold_of_constant_values_is_the_value():
    """C11 (a): 1000 values all equal to 2.0: the KL threshold is 2.0, with no NaN."""
    r = collect("kl_divergence", np.full(1000, 2.0)).compute_range()
    assert r.hi == 2.0 and np.isfinite(r.lo)


def test_kl_histogram_of_an_all_zero_first_batch_merges_as_if_built_at_once():
    """C11 (b): an all-zero first batch, then three of ReLU(randn): the streamed histogram
    equals the one built from all batches at once, and the threshold is positive."""
    batches = [np.zeros((4, 8, 6, 6))] + [
        np.maximum(RNG.standard_normal((4, 8, 6, 6)), 0) for _ in range(3)
    ]
    streamed = make_collector("kl_divergence")
    for i, b in enumerate(batches):
        streamed.update(b, batch=i)
    at_once = make_collector("kl_divergence")
    at_once.update(np.concatenate(batches))
    assert np.array_equal(streamed.hist.counts, at_once.hist.counts)
    assert streamed.hist.zeros == at_once.hist.zeros == int(np.sum(np.concatenate(batches) == 0))
    r = streamed.compute_range()
    assert r.hi > 0 and np.isfinite(r.hi)


def test_nonfinite_values_are_excluded_and_recorded_by_every_collector():
    """C12: a NaN and an inf in two batches are left out of every collector's range and
    recorded with their batches."""
    batches = [RNG.standard_normal((4, 3, 8, 8)) for _ in range(4)]
    batches[1][0, 0, 0, 0] = np.nan
    batches[3][2, 1, 3, 3] = np.inf
    for mode in ("max", "percentile", "kl_divergence"):
        c = make_collector(mode)
        for i, b in enumerate(batches):
            c.update(b, batch=i)
        r = c.compute_range()
        finite = np.concatenate([b[np.isfinite(b)] for b in batches])
        assert np.isfinite([r.lo, r.hi]).all() and r.hi > 0
        assert (r.observed_min, r.observed_max) == (finite.min(), finite.max())
        assert r.nonfinite == 2 and r.nonfinite_batches == [1, 3]


def test_kl_threshold_on_narrow_histogram_keeps_everything():
    counts = np.zeros(NUM_BINS, dtype=np.int64)
    counts[:100] = 10
    assert kl_threshold(counts, 0.5, 128) == 50.0


def test_unknown_mode_lists_valid_choices():
    with pytest.raises(ValueError, match="kl_divergence"):
        make_collector("entropy")


class _Tokens(torch.nn.Module):
    """A Linear on a 3-D input: (N, 1, T, 6) -> (N, T, 6) tokens -> (N, T, 5), pooled."""

    def __init__(self):
        super().__init__()
        self.fc = torch.nn.Linear(6, 5)

    def forward(self, x):
        return self.fc(x[:, 0]).mean(1)


@pytest.mark.parametrize("n_valid", [2, 1])
def test_linear_on_tokens_is_calibrated_on_every_token_of_the_real_images(n_valid):
    """torch.export flattens the tokens to an (N*T, K) matmul input; the range must cover
    the T tokens of each real image (it had covered the first N rows only: image 0's first
    tokens), and none of the padding images'."""
    from helpers import LLVM, loaded

    from qbench.calibration.calibrate import calibrate_module
    from qbench.measure.runners import observer_runner
    from qbench.model import frontend, graph

    x = np.random.default_rng(7).standard_normal((2, 1, 6, 6)).astype(np.float32)
    x[1] *= 10  # the second image's tokens are ten times wider
    imported = frontend.import_model(loaded(_Tokens(), x.shape[1:]), 2)
    layers = graph.find_layers(imported.mod, imported.layer_names)
    observer = observer_runner(imported.mod, LLVM, x.shape[1:], 2)
    ranges = calibrate_module(observer, imported.mod, layers, [(x, n_valid)], "max", {})
    (r,) = ranges.values()
    real = x[:n_valid]
    assert r.observed_min == pytest.approx(float(real.min()))
    assert r.observed_max == pytest.approx(float(real.max()))


def test_silus_own_output_range_is_calibrated():
    """C09 (a): the range calibrated after SiLU is SiLU's own output's, about [-0.28, 8], not
    its input's."""
    torch.manual_seed(9)
    model = nn.Sequential(nn.SiLU(), nn.Conv2d(16, 8, 1)).eval()
    calib = [
        np.random.default_rng(s).uniform(-8, 8, (1, 16, 8, 8)).astype(np.float32) for s in range(4)
    ]
    q = quantize_tiny(model, calib)
    r = q.ranges[q.layers[0].name]
    x = np.concatenate(calib)
    silu = x / (1 + np.exp(-x))  # SiLU's own output, computed independently
    assert r.lo == pytest.approx(silu.min(), abs=1e-5) and r.lo > -0.3
    assert r.hi == pytest.approx(silu.max(), abs=1e-5)


def test_nonfinite_calibration_values_are_excluded_and_counted():
    """C12: a NaN and an inf in two calibration batches are excluded and counted with their
    batches; every scale is finite and positive, and so is the INT8 output."""
    torch.manual_seed(12)
    model = nn.Sequential(nn.Conv2d(3, 8, 3), nn.ReLU(), nn.Conv2d(8, 8, 1)).eval()
    calib = [randn(4, 3, 8, 8, seed=s) for s in range(4)]
    calib[1][0, 0, 0, 0] = np.nan
    calib[2][1, 2, 3, 3] = np.inf
    q = quantize_tiny(model, calib)
    first = q.ranges[q.layers[0].name]
    assert first.nonfinite == 2 and first.nonfinite_batches == [1, 2]
    for plan in q.plans:
        assert np.isfinite(plan.act.scale) and plan.act.scale > 0
    assert np.isfinite(q.run("int8", randn(4, 3, 8, 8, seed=50))).all()


def _prepare(tmp_path, model_spec):
    from qbench.pipeline import RunOptions
    from qbench.pipeline.prepare import prepare
    from qbench.quantize import QuantConfig

    opts = RunOptions(
        model=model_spec, data="synthetic", calib_size=2, eval_size=2, batch_size=2,
        cache_dir=str(tmp_path / "cal"), reports_dir=str(tmp_path / "rep"),
        tuning_db=str(tmp_path / "db"), quant=QuantConfig(calib_mode="max"),
    )  # fmt: skip
    return prepare(opts)


def test_a_changed_forward_recalibrates(tmp_path, small_models):
    """C17: a stale calibration cache: once forward() computes x * 8 instead of x * 1, the
    cache misses and the first layer's range grows 8 times."""
    first = _prepare(tmp_path, f"{small_models}:scaled")
    small_models.write_text(SMALL_MODELS.replace("FACTOR", "8.0"))
    second = _prepare(tmp_path, f"{small_models}:scaled")
    assert not second.calibration.cache_hit
    name = first.layers[0].name
    grow = second.ranges[name].hi / first.ranges[name].hi
    assert grow == pytest.approx(8.0, rel=1e-4)


def test_cache_key_follows_the_graph_not_the_names(tmp_path, small_models):
    """C17: the same graph hits the calibration cache; a changed op misses it, under another
    key."""
    first = _prepare(tmp_path, f"{small_models}:scaled")
    assert _prepare(tmp_path, f"{small_models}:scaled").calibration.cache_hit  # same graph
    small_models.write_text(SMALL_MODELS.replace("FACTOR", "1.0").replace("x * 1.0", "x + 0.5"))
    third = _prepare(tmp_path, f"{small_models}:scaled")
    assert not third.calibration.cache_hit
    assert third.calibration.cache_key != first.calibration.cache_key


def _swap_first(entry):
    name = next(iter(entry["ranges"]))
    r = entry["ranges"][name]
    r["lo"], r["hi"] = r["hi"], r["lo"]


def _drop_last(entry):
    entry["ranges"].pop(list(entry["ranges"])[-1])


def _huge(entry):
    next(iter(entry["ranges"].values()))["hi"] = 1e30


def _as_list(entry):
    entry["ranges"] = list(entry["ranges"].values())


@pytest.mark.parametrize("damage", [_swap_first, _drop_last, _huge, _as_list])
def test_a_damaged_cache_entry_is_recalibrated_with_a_warning(
    tmp_path, small_models, caplog, damage
):
    """A cache entry edited by hand or damaged (a range's ends swapped, a layer's range
    gone, a range widened to 1e30, ranges no longer a table) fails its checksum or its
    checks: the run recalibrates, says why, and gets the ranges of a clean calibration (they
    had been used as found, or crashed the run with KeyError/AttributeError)."""
    first = _prepare(tmp_path, f"{small_models}:scaled")
    (path,) = (tmp_path / "cal").glob("*.json")
    entry = json.loads(path.read_text())
    damage(entry)
    path.write_text(json.dumps(entry))
    with caplog.at_level("WARNING"):
        second = _prepare(tmp_path, f"{small_models}:scaled")
    assert not second.calibration.cache_hit
    assert any(
        "unreadable" in r.getMessage() and "recalibrating" in r.getMessage() for r in caplog.records
    )
    assert second.ranges == first.ranges
    assert _prepare(tmp_path, f"{small_models}:scaled").calibration.cache_hit  # rewritten whole


def test_a_cache_that_cannot_be_written_is_warned_about(tmp_path, small_models, caplog):
    """A folder where the cache entry's file would go: the run goes on with a warning (it
    had crashed with IsADirectoryError)."""
    first = _prepare(tmp_path, f"{small_models}:scaled")
    (path,) = (tmp_path / "cal").glob("*.json")
    path.unlink()
    path.mkdir()
    with caplog.at_level("WARNING"):
        second = _prepare(tmp_path, f"{small_models}:scaled")
    assert second.ranges == first.ranges
    assert any("not written" in r.getMessage() for r in caplog.records)
