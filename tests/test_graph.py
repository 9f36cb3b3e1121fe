"""Graph inspection: layers, names, MAC counts; every nn.Conv2d/nn.Linear call is one row
of the layer table under its PyTorch name."""

import importlib.util

import pytest
import torch
from fieldcases import layer_run, refused, run_report
from helpers import loaded
from torch import nn

from qbench.model import frontend, graph


def _imported(module, shape, batch):
    return frontend.import_model(loaded(module, shape), batch)


def test_layers_named_from_parameters_and_macs_hand_counted():
    torch.manual_seed(0)
    model = nn.Sequential(
        nn.Conv2d(3, 8, 3),
        nn.ReLU(),
        nn.Conv2d(8, 8, 3, groups=4, padding=1),
        nn.Flatten(),
        nn.Linear(288, 10),
    ).eval()
    imported = _imported(model, (3, 8, 8), 2)
    layers = graph.find_layers(imported.mod, imported.layer_names)
    assert [(la.name, la.op, la.groups) for la in layers] == [
        ("0", "conv2d", 1),
        ("2", "conv2d", 4),
        ("4", "matmul", 1),
    ]
    # batch 2: conv 8*6*6 outputs x 3*3*3; grouped 8*6*6 x 2*3*3; linear 10 x 288
    expected = 2 * (8 * 36 * 27 + 8 * 36 * 18 + 10 * 288)
    assert graph.gemm_macs(imported.mod) == expected


def test_observer_returns_each_layer_input():
    model = nn.Sequential(nn.Conv2d(3, 4, 3), nn.ReLU(), nn.Conv2d(4, 4, 1)).eval()
    obs = graph.observer_module(_imported(model, (3, 6, 6), 1).mod)
    fields = obs["main"].ret_ty.fields
    shapes = [[int(d) for d in f.shape] for f in fields]
    assert shapes == [[1, 4, 4, 4], [1, 3, 6, 6], [1, 4, 4, 4]]


WEIGHTED = (torch.nn.Linear, torch.nn.Conv1d, torch.nn.Conv2d, torch.nn.ConvTranspose2d)
# products of an activation and a parameter outside any module, by hand (``other_products``'s
# einsum)
OUTSIDE_MODULES = {"other_products": 1}


def _calls_counted_by_pytorch(path, name):
    """{module paths sharing one weight: calls} of every nn.Linear and convolution (Conv1d,
    Conv2d, ConvTranspose2d, ...), counted here with forward hooks."""
    spec = importlib.util.spec_from_file_location("case_models", path)
    source = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(source)
    model, shape = getattr(source, name)()
    paths, calls = {}, {}
    for module_path, sub in model.named_modules(remove_duplicate=False):
        if isinstance(sub, WEIGHTED):
            paths.setdefault(id(sub.weight), set()).add(module_path)
    for sub in {id(m): m for m in model.modules()}.values():
        if isinstance(sub, WEIGHTED):
            sub.register_forward_hook(
                lambda m, a, o: calls.update({id(m.weight): calls.get(id(m.weight), 0) + 1})
            )
    with torch.no_grad():
        model(torch.zeros((2, *shape)))
    return {frozenset(paths[key]): n for key, n in calls.items()}


@pytest.mark.parametrize(
    "name",
    [
        "rescaling",
        "linear_keyword",
        "convnext_block",
        "instance_norm",
        "two_branches",
        "skip_around_batchnorm",
        "shared",
        "permuted_linear",
        "shared_weight",
        "aliased_module",
        "other_products",
    ],
)
def test_every_conv_and_linear_call_is_in_the_layer_table(tmp_path, capsys, layer_models, name):
    """C22-C26's kind: The invariant: each nn.Linear or convolution call the model makes is
    one row of the layer table under its module path (a second call as ``<path>#2``), INT8 or
    FP32 with its reason (a Conv1d or ConvTranspose2d: no INT8 op), a product of an
    activation and a parameter outside modules counts in an ``(op outside modules)`` row,
    and the console's "layers built in INT8: N of M" counts every one."""
    code = layer_run(tmp_path, "--model", f"{layer_models}:{name}", "--weight-rounding", "nearest")
    out = capsys.readouterr().out
    assert code in (0, 1), out
    rows = run_report(tmp_path)["layers"]
    expected = _calls_counted_by_pytorch(layer_models, name)
    counted, outside = dict.fromkeys(expected, 0), 0
    for row in rows:
        if row["name"].endswith(" outside modules)"):
            outside += int(row["reason"].split()[0])
            continue
        (group,) = [g for g in expected if row["name"].split("#")[0] in g]
        counted[group] += int(row["reason"].split()[0]) if row["index"] is None else 1
        assert row["dtype"] != "float32" or row["reason"], row
    assert counted == expected and outside == OUTSIDE_MODULES.get(name, 0)
    int8 = sum(row["dtype"] != "float32" for row in rows)
    assert f"layers built in INT8: {int8} of {len(rows)}" in out


def test_a_module_called_twice_keeps_its_name_and_says_why_gptq_is_off(
    tmp_path, capsys, layer_models
):
    """A conv called twice is two rows, ``conv`` and ``conv#2``; GPTQ stays off, saying the
    weight is read by more than one layer."""
    code = layer_run(tmp_path, "--model", f"{layer_models}:shared")
    captured = capsys.readouterr()
    assert code in (0, 1), captured.err
    report = run_report(tmp_path)
    assert [row["name"] for row in report["layers"]] == ["stem", "conv", "conv#2", "fc"]
    assert "read by more than one layer" in captured.out + captured.err
    assert report["calibration"]["weight_rounding"].startswith("nearest")


def test_other_products_leave_every_layer_its_name(tmp_path, capsys, layer_models):
    """A Conv1d, a ConvTranspose2d and a product of two activations are convolutions and
    matmuls in the export but no quantizable layer: the conv and the Linear keep their
    names and get GPTQ (every name had been dropped, and GPTQ skipped for a wrong reason)."""
    code = layer_run(tmp_path, "--model", f"{layer_models}:other_products")
    assert code in (0, 1), capsys.readouterr().err
    report = run_report(tmp_path)
    assert [row["name"] for row in report["layers"]][:2] == ["conv", "fc"]
    assert report["calibration"]["weight_rounding"].startswith("gptq")


def test_a_layer_with_nan_weights_is_refused_naming_it(tmp_path, capsys):
    """A NaN among a Linear's weights (a diverged training run) is exit 2 naming the layer
    and the count, before calibration: no scale quantizes it (the run had gone on, showing
    INT8 agreeing 100 % with a NaN reference)."""
    (tmp_path / "nan.py").write_text(
        "import torch\n\n"
        "def model():\n"
        "    torch.manual_seed(0)\n"
        "    net = torch.nn.Sequential(torch.nn.Conv2d(3, 4, 3), torch.nn.Flatten(),\n"
        "                              torch.nn.Linear(4 * 14 * 14, 10)).eval()\n"
        "    with torch.no_grad():\n"
        "        net[2].weight[3, 5] = float('nan')\n"
        "        net[2].weight[1, 0] = float('inf')\n"
        "    return net, (3, 16, 16)\n"
    )
    code = layer_run(tmp_path, "--model", f"{tmp_path / 'nan.py'}:model")
    assert code == 2
    refused(capsys, tmp_path, "layer 2 (matmul): 2 of its 7840 weights are NaN or infinite")
