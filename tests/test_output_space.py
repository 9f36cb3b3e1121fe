"""Outputs are read for what they are (field case C28, issue 35): logits, probabilities
(non-negative rows that sum to 1), percentages (rows that sum to 100), log-probabilities (rows
whose logsumexp is 0) and independent probabilities (sigmoids, each value in (0, 1]) are told
apart (``metrics.output_kind``), and fidelity, flips and margins are judged in the model's
logits: centred for a distribution, the log-odds of each sigmoid (``metrics.judged``),
whatever the model ends in; the report says which output the model returns and the space it
was judged in."""

import contextlib
import json
import math
import textwrap
from pathlib import Path

import numpy as np
import pytest

from qbench.cli.main import main
from qbench.measure import timing
from qbench.measure.metrics import (
    AS_IS,
    CENTRED,
    LOG_ODDS,
    LOG_PROBABILITIES,
    LOGITS,
    OVER_IMAGES,
    PERCENTAGES,
    PROBABILITIES,
    SIGMOIDS,
    SINGLE,
    compare_logits,
    judged,
    output_kind,
    output_of,
    per_image,
)

HERE = Path(__file__).parent

# C28: the same classifier ending in its logits, log_softmax or softmax; and, for K = 1, the
# same body ending in one value.
C28_MODELS = textwrap.dedent("""
    import torch
    from torch import nn

    class Classifier(nn.Module):
        def __init__(self, end, classes=100):
            super().__init__()
            torch.manual_seed(28)
            self.conv, self.fc = nn.Conv2d(3, 8, 4, stride=4), nn.Linear(128, classes)
            self.end = end

        def forward(self, x):
            z = self.fc(torch.relu(self.conv(x)).flatten(1))
            if self.end == "log_softmax":
                return torch.log_softmax(z, dim=1)
            if self.end == "percent":
                return 100 * torch.softmax(z, dim=1)
            if self.end == "sigmoid":
                return torch.sigmoid(z)
            return torch.softmax(z, dim=1) if self.end == "softmax" else z

    def logits():
        return Classifier("logits").eval(), (3, 16, 16)

    def log_probs():
        return Classifier("log_softmax").eval(), (3, 16, 16)

    def probs():
        return Classifier("softmax").eval(), (3, 16, 16)

    def percent():
        return Classifier("percent").eval(), (3, 16, 16)

    def sigmoid():
        return Classifier("sigmoid").eval(), (3, 16, 16)

    def single():
        return Classifier("logits", classes=1).eval(), (3, 16, 16)
""")
C28_BUILD = (  # the images and the one coarse INT8 build
    *("--data", "synthetic", "--calib-size", "8", "--eval-size", "16", "--batch-size", "8"),
    *("--calib-mode", "global_scale", "--global-scale", "0.2"),
)
C28_FLAGS = (
    *C28_BUILD,
    *("--min-top1-agreement", "0", "--min-top5-agreement", "0"),
    *("--min-int8-speedup", "0"),  # the verdict is the fidelity checks', not this machine's
)
ENDS = ("logits", "log_probs", "probs", "percent", "sigmoid", "single")


class Run:
    def __init__(self, code, folder):
        self.code, self.folder = code, folder
        self.report = json.loads((folder / "report.json").read_text())
        self.markdown = (folder / "report.md").read_text()

    @property
    def int8(self):
        return self.report["results"]["tvm_int8"]["metrics"]

    @property
    def kind(self):
        return self.report["results"]["pytorch_fp32"]["metrics"]["output_kind"]

    @property
    def checks(self):
        return {c["name"]: c for c in self.report["signoff"]["checks"]}


@pytest.fixture(scope="module")
def c28(tmp_path_factory):
    """One ``qbench run`` (the C28 flags) of each of ``C28_MODELS``' functions: {name:
    ``Run``}. Timed by 3 rounds, as conftest's ``quick_timing`` would."""
    root = tmp_path_factory.mktemp("c28")
    path = root / "models.py"
    path.write_text(C28_MODELS)
    runs = {}
    rounds = timing.Rounds(0, 3, lambda: (0.0, True))
    with timing.replaced_rounds(rounds), contextlib.redirect_stdout(None):
        for end in ENDS:
            folders = ["--cache-dir", str(root / "cal"), "--reports-dir", str(root / end)]
            code = main(["run", "--model", f"{path}:{end}", *C28_FLAGS, *folders])
            (folder,) = (root / end).iterdir()
            runs[end] = Run(code, folder)
    return runs


def _same(a, b, rel=1e-6):
    return a == pytest.approx(b, rel=rel)


@pytest.mark.parametrize(
    "end, kind",
    [("log_probs", LOG_PROBABILITIES), ("probs", PROBABILITIES), ("percent", PERCENTAGES)],
)
def test_c28_a_model_ending_in_log_softmax_or_softmax_is_judged_as_its_logits(c28, end, kind):
    """C28: the classifier returning log_softmax(z) (or softmax(z), or 100 softmax(z)) is
    judged as the one
    returning z: the same INT8 error gives the same SQNR, cosine, max abs diff, flips and
    verdict (FAIL: coarse global scale 0.2), where before the log-probabilities' per-row
    logsumexp inflated the signal (SQNR 45.0 against 9.8 dB, a PASS)."""
    base, other = c28["logits"], c28[end]
    assert (base.kind, other.kind) == (LOGITS, kind)
    assert base.int8["sqnr_db"] < 17 and base.int8["cosine"] < 0.99  # coarse: the checks judge
    assert base.code == other.code == 1
    assert base.report["signoff"]["verdict"] == other.report["signoff"]["verdict"] == "FAIL"
    failed = {n for n, c in base.checks.items() if c["passed"] is False}
    assert failed == {"INT8 logits SQNR", "INT8 logits cosine"}
    assert failed == {n for n, c in other.checks.items() if c["passed"] is False}
    # softmax's float32 rounding before its log is a little coarser than log_softmax's
    rel = 1e-6 if kind == LOG_PROBABILITIES else 1e-5
    for key in ("sqnr_db", "cosine"):
        assert _same(other.int8[key], base.int8[key], rel), key
    # one value's difference: float32's rounding of log-probabilities near -5 is 5e-7
    assert other.int8["max_abs_diff"] == pytest.approx(base.int8["max_abs_diff"], abs=1e-5)
    for key in ("top1_agreement", "top5_agreement", "near_tie_flips", "decisive_flips"):
        assert other.int8[key] == base.int8[key], key
    for name in ("INT8 logits SQNR", "INT8 logits cosine"):
        assert _same(other.checks[name]["value"], base.checks[name]["value"], rel)
    flips = [r.report["results"]["tvm_int8"]["per_image"]["flips"] for r in (base, other)]
    assert flips[0]
    assert [f["index"] for f in flips[0]] == [f["index"] for f in flips[1]]
    for a, b in zip(*flips, strict=True):
        assert a["margin"] == pytest.approx(b["margin"], abs=1e-5)


def test_c28_a_model_ending_in_a_sigmoid_is_judged_on_the_logits_it_was_given(c28):
    """C28: the classifier returning sigmoid(z) is judged on log(p / (1 - p)) = z: its flips
    and their margins are the logits classifier's (before, the softmax of its centred values
    in (0, 1) shrank every margin, about 4-fold near p = 0.5 and without bound for K large,
    so that a decisive flip could not exist), and its coarse INT8 build fails the fidelity
    checks as the logits one does."""
    base, other = c28["logits"], c28["sigmoid"]
    assert other.kind == SIGMOIDS and other.int8["judged_space"] == LOG_ODDS
    assert other.code == 1 and other.report["signoff"]["verdict"] == "FAIL"
    assert {"INT8 logits SQNR", "INT8 logits cosine"} <= {
        n for n, c in other.checks.items() if c["passed"] is False
    }
    for key in ("top1_agreement", "top5_agreement", "near_tie_flips", "decisive_flips"):
        assert other.int8[key] == base.int8[key], key
    assert other.int8["decisive_images"] == base.int8["decisive_images"]
    flips = [r.report["results"]["tvm_int8"]["per_image"]["flips"] for r in (base, other)]
    assert flips[0] and [f["index"] for f in flips[0]] == [f["index"] for f in flips[1]]
    for a, b in zip(*flips, strict=True):
        assert b["margin"] == pytest.approx(a["margin"], rel=1e-3, abs=2e-6)


@pytest.mark.parametrize(
    "end, words",
    [
        ("logits", "output: logits; max abs diff, cosine, SQNR and flip margins judged on "),
        ("log_probs", "output: log-probabilities (rows whose logsumexp is 0); "),
        ("probs", "output: probabilities (non-negative rows that sum to 1); "),
        ("percent", "output: percentages (non-negative rows that sum to 100); "),
    ],
)
def test_c28_the_report_names_the_output_and_the_space_it_was_judged_in(c28, end, words):
    """C28: report.json names the output's kind (PyTorch FP32's ``output_kind``) and, per
    compared build, the space its error was judged in; report.md says both."""
    run = c28[end]
    for name in ("tvm_fp32", "tvm_int8"):
        assert run.report["results"][name]["metrics"]["judged_space"] == CENTRED
    (line,) = [x for x in run.markdown.splitlines() if x.startswith("- output: ")]
    assert line.startswith(f"- {words}") and "judged on centred logits" in line
    assert ("the log of each probability" in line) == (end == "probs")
    assert ("the log of each percentage" in line) == (end == "percent")


def test_c28_the_report_names_sigmoid_outputs_and_their_log_odds(c28):
    """C28: a sigmoid per class is named as such, and report.md says the log-odds judged."""
    (line,) = [x for x in c28["sigmoid"].markdown.splitlines() if x.startswith("- output: ")]
    assert line.startswith("- output: independent probabilities (the model ends in a sigmoid ")
    assert "judged on log-odds (log(p / (1 - p)) of each value p" in line


def test_c28_a_single_value_is_judged_less_its_mean_over_the_images(c28):
    """C28, K = 1: no softmax over one value; it is judged less the reference's mean over
    the images (no offset shared by every image counts), and the report says so."""
    run = c28["single"]
    assert run.kind == SINGLE and run.int8["judged_space"] == OVER_IMAGES
    assert "top1_agreement" not in run.int8  # no ranking: the fidelity checks judge
    assert run.checks["INT8 logits SQNR"]["value"] == pytest.approx(run.int8["sqnr_db"], abs=1e-6)
    words = "- output: a single value per image; max abs diff, cosine and SQNR judged on each "
    assert words + "value less the reference's mean over the images (an offset" in run.markdown
    assert "; cosine over all values (a row has one degree of freedom" in run.markdown


def test_c28_the_diagnosis_judges_in_the_same_space(tmp_path):
    """C28: ``qbench diagnose`` of the logits and log_softmax classifiers gives the same
    logits SQNR and per-layer SQNR gains (fake-quantized PyTorch, judged as the run is)."""
    path = tmp_path / "models.py"
    path.write_text(C28_MODELS)
    found = []
    for end in ("logits", "log_probs"):
        folders = ["--cache-dir", str(tmp_path / "cal"), "--reports-dir", str(tmp_path / end)]
        with contextlib.redirect_stdout(None):
            assert main(["diagnose", "--model", f"{path}:{end}", *C28_BUILD, *folders]) == 0
        (folder,) = (tmp_path / end).iterdir()
        found.append(json.loads((folder / "diagnose.json").read_text()))
    base, other = found
    assert base["logits_sqnr_db"] < 17
    assert _same(other["logits_sqnr_db"], base["logits_sqnr_db"])
    for a, b in zip(base["layers"], other["layers"], strict=True):
        assert b["logits_sqnr_gain_db"] == pytest.approx(a["logits_sqnr_gain_db"], abs=1e-4)


# Hand-made outputs, two or more per kind, with the kind each is by hand.
KINDS = [
    ([[2.0, 1.0, 0.1], [0.0, 0.0, 0.0]], LOGITS),  # an all-zero row sums to 0, lse ln 3
    ([[-3.0, 5.0]], LOGITS),
    ([[0.7, 0.2, 0.1], [0.25, 0.25, 0.5]], PROBABILITIES),
    ([[1.0, 0.0, 0.0, 0.0]], PROBABILITIES),  # a saturated softmax
    ([[0.5, 0.5005]], PROBABILITIES),  # sums to 1.0005: within the 1e-3 tolerance
    ([[math.log(0.5), math.log(0.5)], [math.log(0.9), math.log(0.1)]], LOG_PROBABILITIES),
    ([[0.0, -60.0, -70.0]], LOG_PROBABILITIES),  # logsumexp 8.8e-27
    ([[60.0, 30.0, 10.0], [0.0, 100.0, 0.0]], PERCENTAGES),
    ([[0.6, 0.3, 0.09]], LOGITS),  # near but not: sums to 0.99 (a sigmoid only by its op)
    ([[50.0, 40.0, 9.0]], LOGITS),  # sums to 99: neither 1 nor 100
    ([[1.2, -0.2]], LOGITS),  # sums to 1 with a negative value
    ([[0.7, 0.2, 0.1], [0.7, 0.2, 0.2]], LOGITS),  # one row sums to 1.1: not every row
    ([[math.log(0.5), math.log(0.5) - 0.01]], LOGITS),  # logsumexp -0.005
    ([[np.nan, 0.5]], LOGITS),  # not finite: no distribution
    ([[1.0], [1.0]], SINGLE),  # K = 1, though it sums to 1
    ([[0.3], [-2.0]], SINGLE),
]


@pytest.mark.parametrize("rows, kind", KINDS)
def test_c28_output_kinds_of_hand_made_arrays(rows, kind):
    """C28: the classifier of output kinds, expected values by hand; float32 as runners
    give them."""
    assert output_kind(np.array(rows, np.float32)) == kind
    assert output_kind(np.array(rows)) == kind


SIGMOID_ROWS = [  # rows of a model that ends in relax.sigmoid, and the kind each is by hand
    ([[0.6, 0.3, 0.09]], SIGMOIDS),  # sums to 0.99: no distribution
    ([[0.9, 0.8, 1.0], [0.0, 0.2, 1e-30]], SIGMOIDS),  # saturated at 1 and at 0
    ([[0.7, 0.2, 0.1]], PROBABILITIES),  # sums to 1: a distribution, whatever computed it
]


@pytest.mark.parametrize("rows, kind", SIGMOID_ROWS)
def test_sigmoids_are_told_by_the_op_that_computes_the_output(rows, kind):
    """A sigmoid per class is told by the model's last op (``graph.output_op``), not by
    values in (0, 1], which logits of a model with small weights also have: the same rows
    are logits when the model ends in anything else."""
    assert output_kind(np.array(rows, np.float32), "relax.sigmoid") == kind
    other = output_kind(np.array(rows, np.float32), "relax.add")
    assert other == (PROBABILITIES if kind == PROBABILITIES else LOGITS)


def _outputs(seed, n=12, k=10):
    """Logits ``z`` (n, k) and an INT8-like ``out`` (z plus noise), float32."""
    rng = np.random.default_rng(seed)
    z = rng.normal(0, 3, (n, k)).astype(np.float32)
    return z, (z + rng.normal(0, 0.3, (n, k))).astype(np.float32)


def _log_softmax(z):
    z = np.asarray(z, np.float64)
    top = z.max(1, keepdims=True)
    return (z - top - np.log(np.exp(z - top).sum(1, keepdims=True))).astype(np.float32)


def _centred_sqnr(ref, out):
    """The judged-space SQNR, recomputed here: each row less its mean, 10 log10 of the
    signal's energy over the noise's."""
    r = ref - ref.mean(1, keepdims=True)
    o = out - out.mean(1, keepdims=True)
    return 10 * np.log10((r**2).sum() / ((r - o) ** 2).sum())


def test_c28_judged_sqnr_by_hand():
    """C28: logits [1, 2, 3] centred are [-1, 0, 1] (energy 2); [1, 2, 3.3] centred are
    [-1.1, -0.1, 1.2]: noise [0.1, 0.1, -0.2] (energy 0.06), 10 log10(100 / 3) = 15.23 dB.
    Adding 7 to a row or passing both through log_softmax changes nothing."""
    ref, out = np.array([[1.0, 2.0, 3.0]]), np.array([[1.0, 2.0, 3.3]])
    expected = 10 * math.log10(2 / 0.06)
    assert compare_logits(ref, out)["sqnr_db"] == pytest.approx(expected, rel=1e-12)
    assert compare_logits(ref + 7, out - 7)["sqnr_db"] == pytest.approx(expected, rel=1e-12)
    m = compare_logits(_log_softmax(ref), _log_softmax(out))
    assert m["sqnr_db"] == pytest.approx(expected, rel=1e-5)
    assert m["judged_space"] == CENTRED


@pytest.mark.parametrize("seed", [0, 1])  # 2 flips each
def test_c28_every_kind_gives_the_judged_sqnr_recomputed_with_numpy(seed):
    """C28: for logits, log_softmax and softmax of the same outputs, and logits shifted by
    a per-row constant, SQNR, cosine, max abs diff and flip margins are the same, and the
    SQNR is the centred-logits SQNR recomputed here with numpy."""
    z, out = _outputs(seed)
    expected = _centred_sqnr(z.astype(np.float64), out.astype(np.float64))
    shift = np.arange(len(z), dtype=np.float32)[:, None] * 10
    exp = np.exp(_log_softmax(z).astype(np.float64)).astype(np.float32)
    exp_out = np.exp(_log_softmax(out).astype(np.float64)).astype(np.float32)
    pairs = {
        LOGITS: (z, out),
        "shifted logits": (z + shift, out + shift),
        LOG_PROBABILITIES: (_log_softmax(z), _log_softmax(out)),
        PROBABILITIES: (exp, exp_out),
    }
    base = compare_logits(z, out)
    assert per_image(z, out)["flips"]
    assert base["sqnr_db"] == pytest.approx(expected, rel=1e-6)
    for name, (ref, o) in pairs.items():
        assert output_kind(ref) == (LOGITS if "logits" in name else name)
        m = compare_logits(ref, o)
        for key in ("sqnr_db", "cosine", "max_abs_diff"):
            assert m[key] == pytest.approx(base[key], rel=1e-5), (name, key)
        margins = [f["margin"] for f in per_image(ref, o)["flips"]]  # rounded to 1e-6
        expected_margins = [f["margin"] for f in per_image(z, out)["flips"]]
        assert margins == pytest.approx(expected_margins, abs=2e-6), name
        assert m["top1_agreement"] == base["top1_agreement"]
    # before: the log-probabilities' logsumexp, a per-row constant, inflated the SQNR
    log_ref, log_out = pairs[LOG_PROBABILITIES]
    raw = 10 * np.log10((log_ref.astype(np.float64) ** 2).sum() / ((log_ref - log_out) ** 2).sum())
    assert raw > expected + 3


def test_c28_probabilities_are_judged_in_log_space_with_a_floor():
    """C28: probabilities are judged as their log less the row's mean; an underflowed 0 is
    floored at the smallest normal float32, so it stays finite."""
    p = np.array([[0.5, 0.25, 0.25], [1.0, 0.0, 0.0]], np.float32)
    j = judged(p, PROBABILITIES)
    assert np.isfinite(j).all()
    logs = np.log([0.5, 0.25, 0.25])
    np.testing.assert_allclose(j[0], logs - logs.mean(), rtol=1e-6)
    floor = math.log(np.finfo(np.float32).tiny)
    np.testing.assert_allclose(j[1], np.array([0, floor, floor]) - floor * 2 / 3, rtol=1e-6)


def test_c28_sigmoid_outputs_are_judged_on_their_log_odds_by_numpy():
    """C28: sigmoid(z) against sigmoid(out) gives the flips, margins and agreement of z
    against out, and the SQNR, cosine and max abs diff of z and out themselves, not centred
    (recomputed with numpy); 100 softmax(z) gives the logits' metrics."""
    z, out = _outputs(0)
    r, o = z.astype(np.float64), out.astype(np.float64)
    sig = [(1 / (1 + np.exp(-t))).astype(np.float32) for t in (r, o)]
    m = compare_logits(*sig, kind=SIGMOIDS)
    assert m["judged_space"] == LOG_ODDS
    noise = ((r - o) ** 2).sum()
    assert m["sqnr_db"] == pytest.approx(10 * np.log10((r**2).sum() / noise), rel=1e-5)
    assert m["max_abs_diff"] == pytest.approx(np.abs(r - o).max(), rel=1e-4)
    cosine = ((r * o).sum(1) / np.linalg.norm(r, axis=1) / np.linalg.norm(o, axis=1)).mean()
    assert m["cosine"] == pytest.approx(cosine, rel=1e-6)
    base = compare_logits(z, out)
    assert m["top1_agreement"] == base["top1_agreement"]
    margins = [
        [f["margin"] for f in per_image(a, b, kind=kind)["flips"]]
        for a, b, kind in ((z, out, LOGITS), (*sig, SIGMOIDS))
    ]
    assert margins[0] and margins[1] == pytest.approx(margins[0], abs=1e-5)
    pct = [(100 * np.exp(_log_softmax(t).astype(np.float64))).astype(np.float32) for t in (z, out)]
    assert compare_logits(*pct)["sqnr_db"] == pytest.approx(base["sqnr_db"], rel=1e-5)


def test_c28_a_saturated_sigmoid_is_clipped_at_float32s_resolution():
    """C28: sigmoid outputs of exactly 1.0 (z > 16.6 in float32) and of 1e-30 are judged at
    +-log((1 - 2^-24) / 2^-24) = +-16.636, so that a saturated value stays finite."""
    j = judged(np.array([[1.0, 1e-30, 0.5]], np.float32), SIGMOIDS)
    edge = math.log((1 - 2.0**-24) / 2.0**-24)
    np.testing.assert_allclose(j, [[edge, -edge, 0.0]], atol=1e-9)


def test_c28_a_single_value_is_compared_less_the_references_mean():
    """C28, K = 1: test_signoff's single logits less their mean 0.5: (1.5, -1.5, 0) against
    (1.75, -1.25, 0), SQNR 10 log10(4.5 / 0.125) = 10 log10(36)."""
    m = compare_logits([[2.0], [-1.0], [0.5]], [[2.25], [-0.75], [0.5]])
    assert m["judged_space"] == OVER_IMAGES
    assert m["sqnr_db"] == pytest.approx(10 * math.log10(36))


def test_c28_a_report_from_before_reads_as_logits_judged_as_is():
    """C28: a report.json written before output kinds were recorded reads back
    (``RunResult.from_json``) as logits, judged as is, and its report.md says so."""
    from qbench.report.markdown import render_markdown
    from qbench.report.result import RunResult

    d = json.loads((HERE / "fixtures" / "report.json").read_text())
    assert "output_kind" not in d["results"]["pytorch_fp32"]["metrics"]
    report = RunResult.from_json(d)
    assert output_of(report.results) == (LOGITS, AS_IS)
    assert "- output: logits; max abs diff, cosine, SQNR and flip margins judged as is" in (
        render_markdown(report)
    )
