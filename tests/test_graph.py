"""Graph inspection: layers, names, MAC counts."""

import torch
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
