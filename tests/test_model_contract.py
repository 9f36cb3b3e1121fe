"""The model's contract, checked at load and export before anything slow (``model.contract``):
one (N, C, H, W) image input, one float32 (N, K) output, no state carried between calls.
Each refusal is exit 2 naming what was found, before calibration."""

import textwrap

import pytest
import torch

from qbench.cli.main import main
from qbench.core.errors import UnsupportedModelError
from qbench.model import frontend, zoo

MODELS = textwrap.dedent(
    """
    import torch
    from torch import nn


    class MovingAverage(nn.Module):  # C27: a streaming normaliser in eval mode
        def __init__(self):
            super().__init__()
            self.conv, self.fc = nn.Conv2d(3, 16, 3, padding=1), nn.Linear(16, 10)
            self.register_buffer("running", torch.zeros(16))

        def forward(self, x):
            y = torch.relu(self.conv(x))
            self.running.mul_(0.5).add_(0.5 * y.mean((0, 2, 3)))
            return self.fc((y - 2 * self.running[None, :, None, None]).mean((2, 3)))


    class Counter(nn.Module):  # counts its calls in a buffer, and scales by the count
        def __init__(self):
            super().__init__()
            self.fc = nn.Linear(3, 10)
            self.register_buffer("calls", torch.zeros(()))

        def forward(self, x):
            self.calls.add_(1)
            return self.fc(x.mean((2, 3))) / self.calls


    class SideInput(nn.Module):  # C29: an image and 4 side features
        def __init__(self):
            super().__init__()
            self.fc = nn.Linear(7, 10)

        def forward(self, x, side):
            return self.fc(torch.cat([x.mean((2, 3)), side], 1))


    class TwoOutputs(nn.Module):  # logits and features
        def __init__(self):
            super().__init__()
            self.fc = nn.Linear(3, 10)

        def forward(self, x):
            f = x.mean((2, 3))
            return self.fc(f), f


    class DictOutput(nn.Module):  # logits in a dict (found by a tester: exit 3 after builds)
        def __init__(self):
            super().__init__()
            self.fc = nn.Linear(3, 10)

        def forward(self, x):
            return {"logits": self.fc(x.mean((2, 3)))}


    class RowsPerPatch(nn.Module):  # (2N, K): rows that are not images
        def __init__(self):
            super().__init__()
            self.fc = nn.Linear(8, 10)

        def forward(self, x):
            return self.fc(x[:, :, :2, :4].reshape(-1, 8))


    class NoScores(nn.Module):  # (N, 0): no score per image (a break-test find: exit 3)
        def __init__(self):
            super().__init__()
            self.fc = nn.Linear(3, 0)

        def forward(self, x):
            return self.fc(x.mean((2, 3)))


    class Noisy(nn.Module):  # noise added in eval mode: the generator's state
        def __init__(self):
            super().__init__()
            self.fc = nn.Linear(3, 10)

        def forward(self, x):
            f = x.mean((2, 3))
            return self.fc(f + 0.1 * torch.randn_like(f))


    class EvalBatchNorm(nn.Module):  # running statistics read, never updated, in eval mode
        def __init__(self):
            super().__init__()
            self.conv, self.bn = nn.Conv2d(3, 8, 3), nn.BatchNorm2d(8)
            self.fc = nn.Linear(8, 10)

        def forward(self, x):
            return self.fc(torch.relu(self.bn(self.conv(x))).mean((2, 3)))


    def build(name):
        torch.manual_seed(0)
        return globals()[name]().eval(), {"input_shape": (3, 16, 16)}
    """
)
for _name in (
    "MovingAverage",
    "Counter",
    "Noisy",
    "SideInput",
    "TwoOutputs",
    "RowsPerPatch",
    "DictOutput",
    "NoScores",
):
    MODELS += f"\n\ndef {_name.lower()}():\n    return build({_name!r})\n"
MODELS += "\n\ndef evalbatchnorm():\n    return build('EvalBatchNorm')\n"


@pytest.fixture
def models(tmp_path):
    path = tmp_path / "contract_models.py"
    path.write_text(MODELS)
    return path


def _refused(tmp_path, capsys, model, *extra):
    """Run ``model`` through ``qbench run``; (exit code, stderr); asserts nothing ran."""
    cache = tmp_path / "cal"
    args = ["run", "--model", model, "--data", "synthetic", "--calib-size", "4"]
    args += ["--eval-size", "4", "--batch-size", "2", "--cache-dir", str(cache)]
    code = main([*args, "--reports-dir", str(tmp_path / "rep"), *extra])
    err = capsys.readouterr().err
    assert not cache.exists() and not (tmp_path / "rep").exists()  # refused before any work
    assert "calibration:" not in err and "Traceback" not in err
    return code, err


@pytest.mark.parametrize(
    "function, named",
    [("movingaverage", "'running'"), ("counter", "'calls'")],
)
def test_state_updated_in_forward_is_named_before_calibration(
    tmp_path, capsys, models, function, named
):
    """C27: a buffer updated on every call (a moving average, a call counter) makes the
    PyTorch reference depend on the calls before; qbench names it and exits 2 instead of
    blaming INT8 for the model's own state."""
    code, err = _refused(tmp_path, capsys, f"{models}:{function}")
    assert code == 2
    assert f"updates {named} on every call" in err and "stateless between calls" in err


def test_random_numbers_drawn_in_forward_are_named_before_calibration(tmp_path, capsys, models):
    """C27's kind: the generator is state too; two calls on one image differ."""
    code, err = _refused(tmp_path, capsys, f"{models}:noisy")
    assert code == 2 and "draws random numbers (randn_like.default)" in err


def test_running_statistics_read_in_eval_mode_are_not_state(models):
    """C27's kind, the other side: BatchNorm in eval mode reads its buffers, updates none."""
    model = zoo.load_model(f"{models}:evalbatchnorm")
    ep = frontend.export(model, 2)
    assert ep.graph_signature.buffers_to_mutate == {}


def test_a_python_model_with_two_inputs_is_refused_naming_them(tmp_path, capsys, models):
    """C29, FILE.py:FUNCTION: forward(x, side) is named, with what qbench takes."""
    code, err = _refused(tmp_path, capsys, f"{models}:sideinput")
    assert code == 2
    assert "forward(x, side) takes 2 inputs" in err and "one (N, C, H, W) image input" in err


def _saved(tmp_path, module, inputs):
    path = tmp_path / "program.pt2"
    torch.export.save(torch.export.export(module.eval(), inputs), path)
    return str(path)


class _Side(torch.nn.Module):
    def __init__(self):
        super().__init__()
        self.fc = torch.nn.Linear(7, 10)

    def forward(self, x, side):
        return self.fc(torch.cat([x.mean((2, 3)), side], 1))


class _Vector(torch.nn.Module):
    def __init__(self):
        super().__init__()
        self.fc = torch.nn.Linear(4, 10)

    def forward(self, v):
        return self.fc(v)


def test_a_saved_program_with_two_inputs_is_refused_naming_them(tmp_path, capsys):
    """C29, FILE.pt2: both inputs named with their shapes, before --input-shape matters."""
    inputs = (torch.zeros(2, 3, 16, 16), torch.zeros(2, 4))
    path = _saved(tmp_path, _Side(), inputs)
    for extra in ([], ["--input-shape", "3", "16", "16"]):
        code, err = _refused(tmp_path, capsys, path, *extra)
        assert code == 2
        assert "takes 2 inputs (x (2, 3, 16, 16), side (2, 4))" in err


def test_a_saved_program_with_a_non_image_input_is_refused(tmp_path):
    """C29's kind: one input, but (N, 4), not (N, C, H, W)."""
    path = _saved(tmp_path, _Vector(), (torch.zeros(2, 4),))
    with pytest.raises(UnsupportedModelError, match=r"its input is v \(2, 4\), not an image"):
        zoo.load_model(path)


@pytest.mark.parametrize(
    "function, found",
    [
        ("twooutputs", "its output is (2, 10) float32, (2, 3) float32;"),
        ("rowsperpatch", "its output is (6, 10) float32 for a batch of 2: rows are not images"),
        ("dictoutput", "forward() returns a dict;"),
        ("noscores", "its output is (2, 0) float32: no score per image;"),
    ],
)
def test_outputs_other_than_one_row_of_scores_per_image_are_refused(
    tmp_path, capsys, models, function, found
):
    """The output contract: one float32 (N, K) tensor, one row per image."""
    code, err = _refused(tmp_path, capsys, f"{models}:{function}")
    assert code == 2 and found in err and "one float32 (N, K) output" in err


def test_a_symbolic_batch_dimension_is_refused_naming_it():
    """A ``.pt2`` exported with a dynamic batch ``Dim`` imports with a symbolic output row
    count; qbench takes programs exported at ``--batch-size``: exit 2 naming the dimension
    (it had raised a TypeError formatting the shape, found by a tester)."""
    from tvm import relax, tirx

    from qbench.model.contract import check_outputs

    b = tirx.Var("b", "int64")
    x = relax.Var("x", relax.TensorType([b, 10], "float32"))
    bb = relax.BlockBuilder()
    with bb.function("main", [x]):
        bb.emit_func_output(x)
    expected = r"output is \(\?, 10\) float32: its batch dimension is symbolic"
    with pytest.raises(UnsupportedModelError, match=expected):
        check_outputs(bb.get(), "dyn.pt2", 8)
