"""Default CPU schedules (``qbench.compile.kernels.schedules``) of the kernels no hand
schedule covers."""

import numpy as np
import pytest
import torch
from helpers import quantize_tiny, torch_out
from torch import nn


class C21(nn.Module):
    def __init__(self):
        super().__init__()
        torch.manual_seed(21)
        self.c1, self.c2, self.fc = (
            nn.Conv2d(3, 1, 3, padding=1),
            nn.Conv2d(1, 2, 1),
            nn.Linear(1, 3),
        )

    def forward(self, x):
        y = self.c2(torch.relu(self.c1(x))).mean(dim=(2, 3))
        return self.fc(y.sum(dim=1, keepdim=True))


class ReductionLengths(nn.Module):
    """conv2d and matmul layers whose reductions have length 1, 2 and 3."""

    def __init__(self):
        super().__init__()
        torch.manual_seed(22)
        self.k3, self.k1 = nn.Conv2d(3, 1, 1), nn.Conv2d(1, 2, 1)
        self.k2, self.dw = nn.Conv2d(2, 3, 1), nn.Conv2d(3, 3, 1, groups=3)
        self.fc3, self.fc1, self.fc2 = nn.Linear(3, 1), nn.Linear(1, 2), nn.Linear(2, 4)

    def forward(self, x):
        y = self.dw(self.k2(self.k1(self.k3(x)))).mean(dim=(2, 3))
        return self.fc2(self.fc1(self.fc3(y)))


@pytest.mark.parametrize("model", [C21, ReductionLengths])
def test_reductions_of_length_one_build_and_match(model):
    """C21: conv2d and matmul layers whose reductions have length one (and two, three) build,
    quantized, and match PyTorch in FP32 and INT8."""
    module = model().eval()
    calib = [np.random.default_rng(s).standard_normal((2, 3, 16, 16)).astype(np.float32)
             for s in range(4)]  # fmt: skip
    q = quantize_tiny(module, calib)
    assert all(p.quantized for p in q.plans)
    x = calib[0]
    ref = torch_out(module, x)
    assert np.abs(q.run("fp32", x) - ref).max() <= 1e-5 * max(1.0, np.abs(ref).max())
    assert np.abs(q.run("int8", x) - ref).max() <= 0.05 * np.abs(ref).max()
