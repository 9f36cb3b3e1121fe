"""The runners (``qbench.measure.runners``): each reads the batch the caller gave, whatever
the runner before it did with its own."""

import numpy as np
import pytest
import torch
from fieldcases import layer_run, run_report

from qbench.measure.runners import TorchRunner


@pytest.mark.parametrize("name", ["rescaling", "inplace_first"])
def test_a_forward_that_writes_its_input_changes_no_other_runners_input(
    tmp_path, capsys, layer_models, name
):
    """C22: PyTorch runs first; a forward that writes to its input must not change what TVM
    reads: TVM FP32 agrees with PyTorch on every image (it had agreed on none)."""
    code = layer_run(tmp_path, "--model", f"{layer_models}:{name}")
    err = capsys.readouterr().err
    assert code in (0, 1), err
    assert "writes to its input tensor in place" in err
    results = run_report(tmp_path)["results"]
    assert results["tvm_fp32"]["metrics"]["top1_agreement"] == 1.0
    assert results["tvm_fp32"]["metrics"]["sqnr_db"] > 60


def test_the_torch_runner_leaves_the_callers_batch_alone():
    """C22: TorchRunner runs a model that writes its input on its own copy: the caller's batch
    is unchanged by infer and by the timed call."""
    module = torch.nn.Sequential(torch.nn.ReLU(inplace=True), torch.nn.Flatten()).eval()
    x = np.linspace(-1, 1, 2 * 3 * 2 * 2, dtype=np.float32).reshape(2, 3, 2, 2)
    before = x.copy()
    runner = TorchRunner(module, 2, (3, 2, 2))
    out = runner.infer(x)
    np.testing.assert_array_equal(x, before)
    np.testing.assert_array_equal(out, np.maximum(before, 0).reshape(2, -1))
    runner.timed_call(x)()
    np.testing.assert_array_equal(x, before)
