"""BatchNorm folding (``qbench.model.fold``): every folded graph computes what the PyTorch eval
model computes and holds no batch_norm; a conv -> BatchNorm folds to exactly the graph of
TVM's own FoldBatchnormToConv2D + FoldConstant path; a conv whose output another branch reads
too keeps its BatchNorm apart (C26)."""

import numpy as np
import pytest
import torch
from fieldcases import layer_run, run_report
from helpers import batchnorm_model, loaded, run_tvm, torch_out
from torch import nn

from qbench.model import fold, frontend, graph

SHAPE = (3, 8, 8)


def _bn(channels, **kwargs):
    """A BatchNorm2d with non-trivial running statistics (and affine parameters, if any)."""
    bn = nn.BatchNorm2d(channels, **kwargs)
    bn.running_mean.normal_(0.0, 2.0)
    bn.running_var.uniform_(0.1, 4.0)
    if bn.affine:
        bn.weight.data.normal_()
        bn.bias.data.normal_()
    return bn


class WidthBias(nn.Module):
    """conv2d + a bias along the width axis (not per channel; C == W) -> BatchNorm."""

    def __init__(self):
        super().__init__()
        self.conv = nn.Conv2d(3, 8, 1, bias=False)
        self.bias = nn.Parameter(torch.randn(8))
        self.bn = _bn(8)

    def forward(self, x):
        return self.bn(self.conv(x) + self.bias)


def _conv_bn(bias, **bn_kwargs):
    return nn.Sequential(nn.Conv2d(3, 8, 3, padding=1, bias=bias), _bn(8, **bn_kwargs), nn.ReLU())


MODELS = {
    "conv_bias_bn_eps_1e-3": lambda: _conv_bn(True, eps=1e-3),
    "conv_bn_eps_0.1": lambda: _conv_bn(False, eps=0.1),
    "depthwise_bias_bn_no_affine": lambda: nn.Sequential(
        nn.Conv2d(3, 6, 3, groups=3), _bn(6, affine=False)
    ),
    "bn_after_pool": lambda: nn.Sequential(
        nn.Conv2d(3, 4, 3), nn.MaxPool2d(2), _bn(4, eps=1e-2), nn.Flatten(), nn.Linear(36, 5)
    ),
    "bias_along_width": WidthBias,
}
FOLDED_INTO_CONV = {"conv_bias_bn_eps_1e-3", "conv_bn_eps_0.1", "depthwise_bias_bn_no_affine"}


def _model(name):
    torch.manual_seed(0)
    return MODELS[name]().eval()


def _unfolded(model):
    """``model`` imported to Relax as qbench imports it, before ``fold_batchnorm``."""
    from tvm.relax.frontend.torch import from_exported_program

    ep = frontend.export(loaded(model, SHAPE), 2)
    return from_exported_program(ep, run_ep_decomposition=False, unwrap_unit_return_tuple=True)


def _run(mod, x):
    import tvm

    return run_tvm(tvm.compile(mod, target="llvm"), x)


@pytest.mark.parametrize("name", MODELS)
def test_folded_graph_computes_the_pytorch_output_without_batch_norm(name):
    model = _model(name)
    mod = frontend.import_model(loaded(model, SHAPE), 2).mod
    ops = graph.op_counts(mod)
    assert "relax.nn.batch_norm" not in ops
    if name in FOLDED_INTO_CONV:  # scale in the weights, shift (and conv bias) in one add
        assert set(ops) <= {"relax.nn.conv2d", "relax.add", "relax.nn.relu"}
        assert ops["relax.add"] == 1
    else:  # decomposed into elementwise ops after the conv
        assert ops["relax.multiply"] == 1
    x = np.random.default_rng(1).standard_normal((2, *SHAPE)).astype(np.float32)
    ref = torch_out(model, x)
    np.testing.assert_allclose(_run(mod, x), ref, rtol=1e-5, atol=1e-5 * np.abs(ref).max())


def test_conv_batchnorm_folds_to_the_graph_of_tvms_pass():
    import tvm
    from tvm import relax

    mod = _unfolded(_model("conv_bn_eps_0.1"))
    tvm_path = tvm.transform.Sequential(
        [
            relax.transform.FoldConstant(),
            relax.transform.FoldBatchnormToConv2D(),
            relax.transform.FoldConstant(),
        ]
    )(mod)
    tvm.ir.assert_structural_equal(fold.fold_batchnorm(mod), tvm_path)  # constants included


def test_scale_shift_is_the_batchnorm_formula():
    rng = np.random.default_rng(0)
    gamma, beta, mean = rng.standard_normal((3, 5)).astype(np.float32)
    var = rng.uniform(0.1, 2.0, 5).astype(np.float32)
    y = rng.standard_normal((4, 5)).astype(np.float32)
    scale, shift = fold.bn_scale_shift(gamma, beta, mean, var, 1e-3)
    assert scale.dtype == shift.dtype == np.float32
    expected = (y - mean) / np.sqrt(var.astype(np.float64) + 1e-3) * gamma + beta
    np.testing.assert_allclose(y * scale + shift, expected, rtol=1e-5, atol=1e-5)


def _nhwc_conv_bn():
    """A Relax conv2d in NHWC/HWIO layout -> batch_norm over axis 3 (not folded: the weights
    are not OIHW)."""
    from tvm import relax

    rng = np.random.default_rng(2)
    weight, gamma, beta, mean = (
        relax.const(rng.standard_normal(shape).astype(np.float32))
        for shape in [(3, 3, 3, 4), (4,), (4,), (4,)]
    )
    var = relax.const(rng.uniform(0.5, 2.0, 4).astype(np.float32))
    x = relax.Var("x", relax.TensorType((2, 8, 8, 3), "float32"))
    bb = relax.BlockBuilder()
    with bb.function("main", [x]):
        with bb.dataflow():
            y = relax.op.nn.conv2d(x, weight, data_layout="NHWC", kernel_layout="HWIO")
            bn = bb.emit(relax.op.nn.batch_norm(y, gamma, beta, mean, var, axis=3, training=False))
            out = bb.emit_output(relax.TupleGetItem(bn, 0))
        bb.emit_func_output(out)
    return bb.get()


def test_batchnorm_after_a_conv_in_another_layout_is_decomposed():
    mod = _nhwc_conv_bn()
    folded = fold.fold_batchnorm(mod)
    ops = graph.op_counts(folded)
    assert "relax.nn.batch_norm" not in ops and ops["relax.multiply"] == 1
    x = np.random.default_rng(3).standard_normal((2, 8, 8, 3)).astype(np.float32)
    np.testing.assert_allclose(_run(folded, x), _run(mod, x), rtol=1e-5, atol=1e-5)


def test_a_batchnorm_after_a_biased_conv_folds_into_its_weights():
    """C01: the BatchNorm after a biased conv leaves neither a batch_norm nor a multiply in the
    imported graph: one conv2d."""
    model = batchnorm_model().eval()
    ops = graph.op_counts(frontend.import_model(loaded(model, (3, 8, 8)), 2).mod)
    assert "relax.nn.batch_norm" not in ops and "relax.multiply" not in ops
    assert ops["relax.nn.conv2d"] == 1


@pytest.mark.parametrize("name", ["two_branches", "skip_around_batchnorm"])
def test_a_conv_with_two_consumers_keeps_names_gptq_and_numbers(
    tmp_path, capsys, layer_models, name
):
    """C26: The BatchNorm of a conv whose output another branch reads too is not folded into a
    second copy of the conv: one conv layer, both layers under their PyTorch names, GPTQ on
    both (it had duplicated the conv, named the layers layer0..2 and skipped GPTQ for the
    whole model with a wrong reason), and TVM FP32 still matches PyTorch."""
    code = layer_run(tmp_path, "--model", f"{layer_models}:{name}")
    assert code in (0, 1), capsys.readouterr().err
    report = run_report(tmp_path)
    assert [row["name"] for row in report["layers"]] == ["conv", "fc"]
    rounding = report["calibration"]["weight_rounding"]
    assert rounding.startswith("gptq") and "2 of 2 layers" in rounding
    fp32 = report["results"]["tvm_fp32"]["metrics"]
    assert fp32["top1_agreement"] == 1.0 and fp32["sqnr_db"] > 60
