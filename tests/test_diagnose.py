"""Per-layer diagnosis, sensitivity ranking and FP32 fallback (qbench.diagnose)."""

import json
import math
import re
from pathlib import Path
from types import SimpleNamespace

import numpy as np
import pytest
import torch
from scipy.stats import beta
from torch import nn

from qbench.cli.main import main
from qbench.core.errors import UserError
from qbench.data.splits import holdout, split
from qbench.diagnose.analysis import as_rows, diagnose, fallback
from qbench.diagnose.plots import input_histograms
from qbench.quantize.bias import bias_shifts
from qbench.quantize.fakequant import fake_layers
from qbench.quantize.params import activation_params, quantize_weight
from qbench.quantize.rewrite import LayerPlan


def _bad_layer_model():
    """Three convs; the middle one has, in every output channel, one weight 400x the others
    on an input channel that the first conv's ReLU keeps at zero: its per-channel int8 scale
    rounds every weight that matters to zero."""
    torch.manual_seed(0)
    model = nn.Sequential(
        nn.Conv2d(3, 8, 3, padding=1),
        nn.ReLU(),
        nn.Conv2d(8, 8, 3, padding=1, bias=False),
        nn.ReLU(),
        nn.Conv2d(8, 8, 3, padding=1, bias=False),
        nn.AdaptiveAvgPool2d(1),
        nn.Flatten(),
    ).eval()
    with torch.no_grad():
        model[0].weight[0] = 0.0
        model[0].bias[0] = -1.0  # channel 0 is 0 after the ReLU
        model[2].weight[:, 0, 0, 0] = 400.0 * model[2].weight.abs().max()
    return model


def _plans(model, names, x):
    """Layers and plans as qbench's planner makes them, from max calibration ranges that
    the test computes itself with forward hooks."""
    ranges = {}
    hooks = [
        model.get_submodule(n).register_forward_hook(
            lambda m, a, o, n=n: ranges.__setitem__(n, (a[0].min().item(), a[0].max().item()))
        )
        for n in names
    ]
    with torch.no_grad():
        model(x)
    for h in hooks:
        h.remove()
    layers, plans = [], []
    for i, n in enumerate(names):
        w = model.get_submodule(n).weight.detach().numpy()
        layers.append(SimpleNamespace(index=i, name=n, weight=w, channel_axis=0))
        plans.append(LayerPlan(activation_params(*ranges[n]), quantize_weight(w, 0, True)))
    return layers, plans


def _numpy_quantized_conv(conv, x, lo, hi):
    """The conv with uint8 input and per-channel int8 weight, quantized here in numpy."""
    lo, hi = min(lo, 0.0), max(hi, 0.0)
    scale = (hi - lo) / 255
    zp = np.clip(np.round(-lo / scale), 0, 255)
    xq = (np.clip(np.round(x / scale) + zp, 0, 255) - zp) * scale
    w = conv.weight.detach().numpy()
    ws = np.abs(w).reshape(len(w), -1).max(1) / 127
    ws = np.where(ws > 0, ws, 1.0)  # an all-zero channel stays zero
    wq = np.clip(np.round(w / ws[:, None, None, None]), -127, 127) * ws[:, None, None, None]
    return conv._conv_forward(
        torch.from_numpy(xq.astype(np.float32)), torch.from_numpy(wq.astype(np.float32)), conv.bias
    )


def _sqnr(ref, out):
    ref, out = np.asarray(ref, np.float64), np.asarray(out, np.float64)
    return 10 * math.log10((ref**2).sum() / ((ref - out) ** 2).sum())


def _bad_layer_file(tmp_path):
    """A FILE.py whose ``build`` returns ``_bad_layer_model``, for the command line."""
    path = tmp_path / "bad.py"
    path.write_text(
        "import sys\n"
        f"sys.path.insert(0, {str(Path(__file__).parent)!r})\n"
        "from test_diagnose import _bad_layer_model\n\n"
        "def build():\n"
        "    return _bad_layer_model(), (3, 12, 12)\n"
    )
    return path


NAMES = ["0", "2", "4"]


@pytest.fixture(scope="module")
def bad():
    model = _bad_layer_model()
    x = torch.randn(16, 3, 12, 12, generator=torch.Generator().manual_seed(1))
    layers, plans = _plans(model, NAMES, x)
    fakes = fake_layers(model, layers, plans)
    return model, fakes, [x[:8], x[8:]]


def test_alone_sqnr_matches_a_numpy_quantized_layer(bad):
    model, fakes, batches = bad
    diagnosis = diagnose(model, fakes, batches)
    x = torch.cat(batches)
    inputs = {}
    hooks = [
        model.get_submodule(n).register_forward_hook(
            lambda m, a, o, n=n: inputs.__setitem__(n, (a[0], o))
        )
        for n in NAMES
    ]
    with torch.no_grad():
        model(x)
        for h in hooks:
            h.remove()
        for n in NAMES:
            xin, ref = inputs[n]
            out = _numpy_quantized_conv(
                model.get_submodule(n), xin.numpy(), xin.min().item(), xin.max().item()
            )
            expected = _sqnr(ref, out)
            assert diagnosis.layers[n].alone.sqnr_db == pytest.approx(expected, abs=0.05), n
    rows = {r["layer"]: r for r in as_rows(diagnosis)}
    assert rows["2"]["alone_sqnr_db"] < rows["0"]["alone_sqnr_db"] - 10
    assert rows["2"]["weights_only_sqnr_db"] < rows["2"]["activations_only_sqnr_db"]
    assert all(r["clipped_fraction"] == 0 for r in rows.values())  # max ranges clip nothing


def test_ranking_puts_the_bad_layer_first_and_fallback_picks_it(bad):
    model, fakes, batches = bad
    diagnosis = diagnose(model, fakes, batches)
    assert diagnosis.ranking()[0] == "2"
    assert diagnosis.agree < diagnosis.images  # all-INT8 misses some top-1 classes
    fb = fallback(model, fakes, batches, diagnosis.ranking(), target=1.0)
    assert fb.reached and fb.kept[0] == "2"
    assert fb.steps[-1].agreement == 1.0 and [s.layer for s in fb.steps[1:]] == fb.kept
    first = fb.steps[0]
    assert (first.layer, first.agree, first.images) == (None, diagnosis.agree, diagnosis.images)
    assert first.sqnr_db == pytest.approx(diagnosis.logits.sqnr_db)
    assert fb.steps[1].sqnr_db - first.sqnr_db >= 0.5 and fb.stop == "target reached"


def test_fallback_undoes_a_layer_that_buys_no_measurable_gain(bad):
    """Layer "0" is not the faulty one: keeping it in FP32 moves the logits SQNR by less than
    the minimum gain, so the search undoes it and stops rather than chase agreement."""
    model, fakes, batches = bad
    fb = fallback(model, fakes, batches, ["0", "2", "4"], target=1.0, min_gain_db=0.5)
    assert (fb.kept, fb.reached, len(fb.steps)) == ([], False, 2)
    undone = fb.steps[1]
    assert undone.layer == "0" and not undone.accepted
    assert abs(undone.sqnr_db - fb.steps[0].sqnr_db) < 0.5
    assert fb.stop.startswith("no measurable gain: 0 added")
    chased = fallback(model, fakes, batches, ["0", "2", "4"], target=1.0, min_gain_db=0.0)
    assert chased.reached and chased.kept[:2] == ["0", "2"]


def test_diagnose_and_the_fallback_say_their_progress_and_an_estimate(bad, capsys):
    """A long diagnosis says its work and the time left after its first batch, and the
    fallback each step's layer, held-out counts and the time left (issue 35: 14 silent
    minutes)."""
    model, fakes, batches = bad
    diagnose(model, fakes, batches)
    err = capsys.readouterr().err
    assert "diagnose: 3 INT8 layers on 2 batches (10 model passes); the first batch took" in err
    fb = fallback(model, fakes, batches, ["2", "0", "4"], target=1.0)
    lines = [ln for ln in capsys.readouterr().err.splitlines() if "FP32 fallback step" in ln]
    assert len(lines) == len(fb.steps)
    assert lines[0].startswith("[qbench] FP32 fallback step 0 of at most 3: every layer INT8")
    assert f"2 in FP32: held-out top-1 agreement {fb.steps[1].agree}/16" in lines[1]


def test_diagnose_command_writes_reports_and_a_skip_file_that_run_takes(tmp_path, capsys, bad):
    """End to end on a user model file: diagnose, fallback, then run --skip-layers @FILE."""
    model_file = _bad_layer_file(tmp_path)
    common = ["--model", f"{model_file}:build", "--data", "synthetic", "--calib-size", "16"]
    common += ["--eval-size", "8", "--calib-mode", "max", "--cache-dir", str(tmp_path / "c")]
    # without bias correction, which would turn the crushed layer's output into its mean
    common += ["--reports-dir", str(tmp_path / "r"), "--no-bias-correction"]
    code = main(["diagnose", *common, "--accuracy-target", "1.0", "--holdout-size", "16"])
    out = capsys.readouterr().out
    (folder,) = (tmp_path / "r").iterdir()
    report = json.loads((folder / "diagnose.json").read_text())
    assert code == 0 and report["ranking"][0] == "2" and report["fallback"]["reached"]
    assert report["fallback"]["kept_fp32"][0] == "2" and "FP32 fallback" in out
    assert report["fallback"]["held_out_images"] == 16
    latency = report["fallback"]["latency_ms"]
    assert set(latency) == {"all_int8", "with_fallback"} and min(latency.values()) > 0
    steps = report["fallback"]["steps"]
    assert [s["latency_ms"] for s in steps][0] == latency["all_int8"]
    assert steps[len(report["fallback"]["kept_fp32"])]["latency_ms"] == latency["with_fallback"]
    first = steps[0]
    assert first["top1_agreement_count"] / first["top1_agreement_total"] == first["top1_agreement"]
    assert (folder / "diagnose.md").read_text().count("\n| 2 ") >= 2  # in both tables
    assert report["plots"][0] == "hist-1-2.png" and len(report["plots"]) == 3
    for png in report["plots"]:
        assert (folder / png).read_bytes()[:8] == b"\x89PNG\r\n\x1a\n"
    skip = folder / "skip_layers.txt"
    assert skip.read_text().splitlines()[1:] == report["fallback"]["kept_fp32"]
    main(["run", *common, "--skip-layers", f"@{skip}", "--repeat", "20"])
    run_report = json.loads(next((tmp_path / "r").glob("*/report.json")).read_text())
    reasons = {la["name"]: la["reason"] for la in run_report["layers"]}
    assert all("--skip-layers" in reasons[name] for name in report["fallback"]["kept_fp32"])


def test_skip_file_that_cannot_be_read_exits_2(tmp_path, capsys):
    code = main(["layers", "--model", "resnet18", "--skip-layers", f"@{tmp_path / 'none.txt'}"])
    assert code == 2 and "--skip-layers @" in capsys.readouterr().err


class _Images(list):
    name = "sample"
    drawn = False


def test_holdout_is_disjoint_from_calibration_and_evaluation():
    images = _Images(range(50))
    chosen = split(images, 10, 20, seed=3)
    held = holdout(images, chosen, 20, seed=3)
    assert len(set(held)) == 20 and not set(held) & (set(chosen.calib) | set(chosen.eval))
    with pytest.raises(UserError, match=r"--holdout-size 21: .* valid: 1..20"):
        holdout(images, chosen, 21, seed=3)
    everything = split(images, 10, 40, seed=3)  # no image left: not "valid: 1..0"
    with pytest.raises(UserError, match=r"take 50; none is left for it \(lower --eval-size"):
        holdout(images, everything, 1, seed=3)


@pytest.mark.parametrize("source", ["synthetic"])
def test_a_holdout_beside_a_drawn_source_changes_neither_calibration_nor_evaluation(source):
    """Synthetic (and hf:) sources draw as many images as a run needs: with a holdout the
    pool grows, and a permutation of the larger pool would move the run's own images. Taken
    in the order drawn, the run with and without a holdout calibrates and evaluates on the
    same pixels, and the holdout is disjoint from them."""
    from qbench.data.sources import open_source

    plain = open_source(source, seed=0, needed=10)
    grown = open_source(source, seed=0, needed=14)
    a, b = split(plain, 4, 6, seed=0), split(grown, 4, 6, seed=0)
    assert plain.content_digest(a.calib + a.eval) == grown.content_digest(b.calib + b.eval)
    held = holdout(grown, b, 4, seed=0)
    assert not set(held) & set(b.calib + b.eval) and len(set(held)) == 4


def test_input_histograms_count_every_input_value_within_the_shown_span(bad):
    model, fakes, batches = bad
    hists = input_histograms(model, fakes, batches, ["2"])
    counts, edges = hists["2"]
    conv_input = torch.relu(torch.cat([model[0](x) for x in batches])).detach()
    assert counts.sum() == conv_input.numel()
    assert edges[0] <= float(conv_input.min()) and edges[-1] >= float(conv_input.max())


def test_bias_shifts_are_measured_for_the_int8_layers_given(bad):
    """What the fallback re-measures at each step: with layer "2" in FP32, layer "4"'s shift
    differs from the all-INT8 one, and layer "2" gets none."""
    model, fakes, batches = bad
    x = torch.cat(batches)
    every = bias_shifts(model, fakes, x)
    with_2_fp32 = bias_shifts(model, fakes, x, active={0, 2})  # layers "0" and "4"
    assert set(every) == {"0", "2", "4"} and set(with_2_fp32) == {"0", "4"}
    np.testing.assert_array_equal(every["0"], with_2_fp32["0"])  # upstream of the change
    assert np.abs(with_2_fp32["4"] - every["4"]).max() > 1e-3
    fb = fallback(model, fakes, batches, ["2", "0", "4"], target=1.0, bias_x=x)
    assert fb.reached and fb.kept == []  # bias correction alone repairs this model


@pytest.mark.parametrize(
    "args, text",
    [
        (["--holdout-size", "0"], "--holdout-size 0: must be >= 1"),
        (["--holdout-size", "3"], "--holdout-size 3: --data"),
    ],
)
def test_bad_holdout_size_exits_2_before_calibration(tmp_path, capsys, args, text):
    from PIL import Image

    folder = tmp_path / "photos"
    folder.mkdir()
    for i in range(10):
        Image.new("RGB", (40, 40), (20 * i, 100, 50)).save(folder / f"{i}.png")
    common = ["--model", "resnet18", "--data", str(folder), "--calib-size", "4"]
    common += ["--eval-size", "4", "--reports-dir", str(tmp_path / "r")]
    common += ["--cache-dir", str(tmp_path / "c"), "--accuracy-target", "0.9"]
    code = main(["diagnose", *common, *args])
    err = capsys.readouterr().err
    assert code == 2 and text in err and "calibration:" not in err


def test_run_with_accuracy_target_keeps_the_bad_layer_in_fp32(tmp_path, capsys):
    model_file = _bad_layer_file(tmp_path)
    args = ["run", "--model", f"{model_file}:build", "--data", "synthetic", "--calib-size", "16"]
    args += ["--eval-size", "8", "--calib-mode", "max", "--cache-dir", str(tmp_path / "c")]
    args += ["--reports-dir", str(tmp_path / "r"), "--no-bias-correction", "--repeat", "20"]
    main([*args, "--accuracy-target", "1.0", "--holdout-size", "16"])
    out = capsys.readouterr().out
    (folder,) = (tmp_path / "r").iterdir()
    report = json.loads((folder / "report.json").read_text())
    kept = report["diagnosis"]["fallback"]["kept_fp32"]
    assert kept[0] == "2" and report["config"]["quant"]["fallback_layers"] == kept
    reasons = {la["name"]: la["reason"] for la in report["layers"]}
    assert all("--accuracy-target fallback" in reasons[name] for name in kept)
    assert "FP32 fallback for top-1 agreement >= 1.0" in out
    md = (folder / "report.md").read_text()
    assert "## Diagnosis and FP32 fallback" in md and "FP32 fallback path:" in md
    html = (folder / "report.html").read_text()
    assert "FP32 fallback path" in html and html.count("<svg") >= 3  # latency, SQNR, path
    assert re.search(r"^\|\s*1\s*\|\s*2\s*\|", md, re.M)  # the path's step 1 keeps "2"


def test_run_diagnose_adds_every_layer_and_the_histograms_to_the_report(tmp_path, capsys):
    """``run --diagnose``: no fallback, the INT8 graph as planned; the report carries every
    INT8 layer's row, the bad layer ranked first, and the histogram PNGs, which report.md
    links and report.html embeds."""
    model_file = _bad_layer_file(tmp_path)
    args = ["run", "--model", f"{model_file}:build", "--data", "synthetic", "--calib-size", "16"]
    args += ["--eval-size", "8", "--calib-mode", "max", "--cache-dir", str(tmp_path / "c")]
    args += ["--reports-dir", str(tmp_path / "r"), "--no-bias-correction", "--repeat", "20"]
    main([*args, "--diagnose"])
    (folder,) = (tmp_path / "r").iterdir()
    report = json.loads((folder / "report.json").read_text())
    diagnosis = report["diagnosis"]
    assert "fallback" not in diagnosis and report["config"]["quant"]["fallback_layers"] == []
    assert [row["layer"] for row in diagnosis["layers"]] == NAMES
    assert diagnosis["ranking"][0] == "2"
    pngs = diagnosis["plots"]
    assert len(pngs) == len(NAMES)
    assert all((folder / p).read_bytes()[:4] == b"\x89PNG" for p in pngs)
    md = (folder / "report.md").read_text()
    assert "## Diagnosis\n" in md and "### Every INT8 layer" in md
    assert all(f"]({p})" in md for p in pngs)
    html = (folder / "report.html").read_text()
    assert html.count('src="data:image/png;base64,') == len(pngs)


FUNCTIONAL_CONV = """
import torch
from torch import nn


class Functional(nn.Module):
    def __init__(self):
        super().__init__()
        self.w = nn.Parameter(torch.randn(4, 3, 3, 3))
        self.head = nn.Linear(4, 3)

    def forward(self, x):
        x = nn.functional.conv2d(x, self.w).relu().mean(dim=(2, 3))
        return self.head(x)


def build():
    torch.manual_seed(0)
    return Functional().eval(), (3, 12, 12)
"""


@pytest.mark.parametrize(
    "args",
    [
        ["diagnose"],
        ["run", "--diagnose"],
        ["run", "--accuracy-target", "0.9", "--holdout-size", "4"],
    ],
)
def test_a_functional_conv_stops_a_diagnosis_before_calibration(tmp_path, capsys, args):
    """Diagnosis needs each INT8 layer's nn.Conv2d/nn.Linear module: a functional conv is
    named (exit 2) right after the import, before calibration or any build."""
    path = tmp_path / "functional.py"
    path.write_text(FUNCTIONAL_CONV)
    common = ["--model", f"{path}:build", "--data", "synthetic", "--calib-size", "4"]
    common += ["--eval-size", "4", "--reports-dir", str(tmp_path / "r")]
    common += ["--cache-dir", str(tmp_path / "c")]
    code = main([*args[:1], *common, *args[1:]])
    err = capsys.readouterr().err
    assert code == 2 and "is not an nn.Conv2d or nn.Linear" in err
    assert "calibration:" not in err and not (tmp_path / "r").exists()


def test_a_functional_conv_runs_with_nearest_rounding_and_says_so(tmp_path, capsys):
    """GPTQ rounds in PyTorch, layer by layer module: a run of a model with a functional
    conv warns, keeps nearest rounding, and its report says so."""
    path = tmp_path / "functional.py"
    path.write_text(FUNCTIONAL_CONV)
    common = ["--model", f"{path}:build", "--data", "synthetic", "--calib-size", "4"]
    common += ["--eval-size", "4", "--reports-dir", str(tmp_path / "r"), "--repeat", "20"]
    main(["run", *common, "--cache-dir", str(tmp_path / "c"), "--batch-size", "4"])
    captured = capsys.readouterr()
    assert "WARNING: GPTQ rounding and bias correction skipped" in captured.err + captured.out
    report = json.loads(next((tmp_path / "r").glob("*/report.json")).read_text())
    calibration = report["calibration"]
    assert calibration["weight_rounding"].startswith("nearest (GPTQ skipped for every layer: ")
    assert "is not an nn.Conv2d or nn.Linear" in calibration["weight_rounding"]
    assert calibration["bias_correction"] == "off"
    # the definition says what was built, so compare matches it with nearest-rounding runs
    assert report["definition"]["quant"]["weight_rounding"] == "nearest"


FLIPPED_CONV = """
import torch
from torch import nn


class Flipped(nn.Conv2d):
    def forward(self, x):
        return nn.functional.conv2d(x, self.weight.flip(2, 3), self.bias)


def build():
    torch.manual_seed(0)
    model = nn.Sequential(nn.Conv2d(3, 4, 3), nn.ReLU(), Flipped(4, 4, 3), nn.Flatten(),
                          nn.Linear(4 * 8 * 8, 3))
    return model.eval(), (3, 12, 12)
"""


def test_a_conv_that_transforms_its_weight_gets_no_bias_correction_and_no_diagnosis(
    tmp_path, capsys
):
    """Fake quantization swaps a module's weight; a module that flips it in forward would be
    modelled wrongly, so bias correction and GPTQ are skipped (with a warning) and a
    diagnosis stops with exit 2, naming the layer."""
    path = tmp_path / "flipped.py"
    path.write_text(FLIPPED_CONV)
    common = ["--model", f"{path}:build", "--data", "synthetic", "--calib-size", "4"]
    common += ["--eval-size", "4", "--reports-dir", str(tmp_path / "r"), "--batch-size", "4"]
    common += ["--cache-dir", str(tmp_path / "c")]
    main(["run", *common, "--bias-correction", "--repeat", "20"])
    captured = capsys.readouterr()
    assert "layers 2: their modules do not compute with their own weight" in captured.err
    calibration = json.loads(next((tmp_path / "r").glob("*/report.json")).read_text())[
        "calibration"
    ]
    assert calibration["bias_correction"].startswith("skipped")
    assert calibration["weight_rounding"].startswith("nearest")
    code = main(["diagnose", *common, "--reports-dir", str(tmp_path / "d")])
    assert code == 2 and "layers 2: their modules do not compute" in capsys.readouterr().err


def test_a_single_logit_model_has_no_agreement_target_and_no_agreement(tmp_path, capsys):
    """A single output logit ranks nothing: --accuracy-target is refused (exit 2) before
    calibration, and a diagnosis reports SQNR without a top-1 agreement."""
    from test_cli import C06_MODEL  # its ``build`` ends in one logit

    path = tmp_path / "c06.py"
    path.write_text(C06_MODEL)
    common = ["--model", f"{path}:build", "--data", "synthetic", "--calib-size", "4"]
    common += ["--eval-size", "4", "--reports-dir", str(tmp_path / "r"), "--batch-size", "1"]
    common += ["--cache-dir", str(tmp_path / "c")]
    assert main(["run", *common, "--accuracy-target", "0.99", "--holdout-size", "4"]) == 2
    err = capsys.readouterr().err
    assert "single output logit" in err and "calibration:" not in err
    assert main(["diagnose", *common]) == 0
    (folder,) = (tmp_path / "r").iterdir()
    report = json.loads((folder / "diagnose.json").read_text())
    assert report["top1_agreement"] is None and report["logits_sqnr_db"] > 0
    assert "top-1 agreement" not in (folder / "diagnose.md").read_text().split("\n")[2]


def test_a_stopped_search_is_reached_only_when_the_held_out_images_cannot_refute_it():
    """63/64: 95 % Clopper-Pearson interval 91.6-99.96 % holds 0.99; 60/64 (upper bound
    98.3 %, hand-checked as the Beta(61, 4) 97.5 % quantile) refutes it."""
    from qbench.diagnose.analysis import Step, _unreached

    assert beta.ppf(0.975, 61, 4) < 0.99 < beta.ppf(0.975, 64, 1)
    kept = _unreached([], [Step(None, 63, 64, 24.5)], 0.99, "no measurable gain")
    assert kept.reached and kept.stop.endswith("63/64, 95 % CI 91.6-100.0 %: target not refuted")
    missed = _unreached([], [Step(None, 60, 64, 20.0)], 0.99, "every layer tried")
    assert not missed.reached and missed.stop.endswith("below the target")


def test_a_target_of_100_percent_says_no_number_of_held_out_images_can_show_it():
    """images_needed(1.0) is None (no count's interval reaches 100 %): the summary says so
    rather than dropping the warning."""
    from qbench.calibration.calibrate import CalibrationInfo
    from qbench.report.diagnosis import DiagnosisReport, FallbackRecord, FallbackStep, summary

    step = FallbackStep(None, True, 1.0, 16, 16, (0.79, 1.0), 30.0)
    fb = FallbackRecord(1.0, 16, None, 0.5, True, "target reached", (), (step,))
    cal = CalibrationInfo("k", "cal", False, 8, "max", {})
    report = DiagnosisReport("m", cal, {}, 8, 3, 30.0, None, (), (), fb, (), 1.0)
    lines = summary(report)
    assert "16 held-out images cannot show 1.0: no number of images can" in "\n".join(lines)


def test_a_single_value_is_judged_about_the_mean_over_every_batch():
    """Batches of one image each (a per-batch mean would leave nothing): 51, 49, 50 against
    50, 50, 52 about the reference's mean 50 are (1, -1, 0) and (0, 0, 2): cosine 0 and
    SQNR 10 log10(2 / 6) by hand, as ``compare_logits`` judges the run's output."""
    from qbench.diagnose.energy import Energy

    energy = Energy()
    for r, o in ((51.0, 50.0), (49.0, 50.0), (50.0, 52.0)):
        energy.add(torch.tensor([[r]]), torch.tensor([[o]]), about_mean=True)
    assert energy.cosine == pytest.approx(0.0, abs=1e-12)
    assert energy.sqnr_db == pytest.approx(10 * math.log10(2 / 6), rel=1e-12)
