"""The field cases' user model files (``--model file.py:function``, ../shared/cases) and
the helpers of the tests that run them through ``qbench run``.

``SMALL_MODELS``: small convnets for the input, calibration-cache and dtype cases (C16, C17,
C20); ``LAYER_MODELS``: the layer-table cases' models (C22-C26 and their kind). The
fixtures ``small_models`` and ``layer_models`` (conftest) write them into a test's folder,
where a test may rewrite them.
"""

import csv
import json
import textwrap
import zlib

import numpy as np
from PIL import Image

from qbench.cli.main import main

SMALL_MODELS = textwrap.dedent("""
    import torch
    from torch import nn

    class Scaled(nn.Module):  # C17: FACTOR is rewritten between runs
        def __init__(self):
            super().__init__()
            torch.manual_seed(17)
            self.conv, self.fc = nn.Conv2d(3, 4, 3), nn.Linear(4, 10)

        def forward(self, x):
            return self.fc(torch.relu(self.conv(x * FACTOR)).mean(dim=(2, 3)))

    def scaled():
        return Scaled().eval(), (3, 16, 16)

    class Wide(nn.Module):  # C16: any H, W
        def __init__(self):
            super().__init__()
            torch.manual_seed(16)
            self.conv, self.fc = nn.Conv2d(3, 4, 3), nn.Linear(4, 10)

        def forward(self, x):
            return self.fc(torch.relu(self.conv(x)).mean(dim=(2, 3)))

    def wide():
        return Wide().eval(), (3, 32, 48)

    def square():
        return Wide().eval(), (3, 16, 16)

    class Half(nn.Module):  # C20
        def __init__(self):
            super().__init__()
            torch.manual_seed(20)
            self.conv, self.fc = nn.Conv2d(3, 4, 3), nn.Linear(4, 10)

        def forward(self, x):
            return self.fc(torch.relu(self.conv(x.half())).mean(dim=(2, 3))).float()

    def half():
        return Half().half().eval(), (3, 16, 16)

    class Casts(nn.Module):  # float32 parameters, a float16 conv inside forward
        def __init__(self):
            super().__init__()
            torch.manual_seed(20)
            self.conv = nn.Conv2d(3, 10, 3)

        def forward(self, x):
            w = self.conv.weight.half()
            return nn.functional.conv2d(x.half(), w).float().mean(dim=(2, 3))

    def casts():
        return Casts().eval(), (3, 16, 16)
""")

LAYER_MODELS = textwrap.dedent("""
    import torch
    from torch import nn

    class Rescaling(nn.Module):  # C22: forward rewrites its input in place
        def __init__(self):
            super().__init__()
            torch.manual_seed(22)
            self.conv, self.fc = nn.Conv2d(3, 8, 3), nn.Linear(8, 6)

        def forward(self, x):
            x.sub_(0.5).mul_(2)
            return self.fc(torch.relu(self.conv(x)).mean(dim=(2, 3)))

    def rescaling():
        return Rescaling().eval(), (3, 16, 16)

    class InplaceFirst(nn.Module):  # C22's kind: a first in-place activation on the input
        def __init__(self):
            super().__init__()
            torch.manual_seed(23)
            self.act = nn.ReLU(inplace=True)
            self.conv, self.fc = nn.Conv2d(3, 8, 3), nn.Linear(8, 6)

        def forward(self, x):
            return self.fc(torch.relu(self.conv(self.act(x))).mean(dim=(2, 3)))

    def inplace_first():
        return InplaceFirst().eval(), (3, 16, 16)

    class Keywords(nn.Module):  # C23: layers called with a keyword argument
        def __init__(self, conv_keyword):
            super().__init__()
            torch.manual_seed(24)
            self.conv_keyword = conv_keyword
            self.conv, self.fc = nn.Conv2d(3, 8, 3), nn.Linear(8, 6)

        def forward(self, x):
            y = self.conv(input=x) if self.conv_keyword else self.conv(x)
            return self.fc(input=torch.relu(y).mean(dim=(2, 3)))

    def linear_keyword():
        return Keywords(False).eval(), (3, 16, 16)

    def both_keywords():
        return Keywords(True).eval(), (3, 16, 16)

    class DirectForward(nn.Module):  # C23's kind: module.forward(x), which skips hooks
        def __init__(self):
            super().__init__()
            torch.manual_seed(25)
            self.conv, self.fc = nn.Conv2d(3, 8, 3), nn.Linear(8, 6)

        def forward(self, x):
            return self.fc.forward(torch.relu(self.conv(x)).mean(dim=(2, 3)))

    def direct_forward():
        return DirectForward().eval(), (3, 16, 16)

    class ChannelsLast(nn.Module):  # C24: a ConvNeXt block, Linears over (N, H, W, C)
        def __init__(self, channels, size):
            super().__init__()
            torch.manual_seed(26)
            self.size = size
            self.stem = nn.Conv2d(3, channels, 3, padding=1)
            self.dw = nn.Conv2d(channels, channels, 7, padding=3, groups=channels)
            self.norm = nn.LayerNorm(channels)
            self.up = nn.Linear(channels, 4 * channels)
            self.down = nn.Linear(4 * channels, channels)
            self.fc = nn.Linear(channels, 6)

        def forward(self, x):
            x = self.stem(x)
            y = self.norm(self.dw(x).permute(0, 2, 3, 1))
            y = self.down(nn.functional.gelu(self.up(y))).permute(0, 3, 1, 2)
            return self.fc((x + y).mean(dim=(2, 3)))

    def convnext_block():
        return ChannelsLast(12, 32).eval(), (3, 32, 32)

    def convnext_square():  # H equals the channel count
        return ChannelsLast(16, 16).eval(), (3, 16, 16)

    class BatchStatistics(nn.Module):  # C25: normalised by each batch's statistics by design
        def __init__(self, norm):
            super().__init__()
            torch.manual_seed(27)
            self.conv, self.norm, self.fc = nn.Conv2d(3, 8, 3, padding=1), norm, nn.Linear(8, 6)

        def forward(self, x):
            return self.fc(torch.relu(self.norm(self.conv(x))).mean(dim=(2, 3)))

    def instance_norm():
        return BatchStatistics(nn.InstanceNorm2d(8, affine=True)).eval(), (3, 16, 16)

    def batch_norm_no_stats():
        return BatchStatistics(nn.BatchNorm2d(8, track_running_stats=False)).eval(), (3, 16, 16)

    class TwoConsumers(nn.Module):  # C26: a conv read by its BatchNorm and another branch
        def __init__(self, residual):
            super().__init__()
            torch.manual_seed(28)
            self.residual = residual
            self.conv, self.bn = nn.Conv2d(3, 8, 3, padding=1), nn.BatchNorm2d(8)
            self.fc = nn.Linear(8 if residual else 16, 6)
            with torch.no_grad():
                self.bn.running_mean.uniform_(-0.5, 0.5)
                self.bn.running_var.uniform_(0.5, 2.0)

        def forward(self, x):
            y = self.conv(x)
            a = torch.relu(self.bn(y))
            if self.residual:
                return self.fc((a + y).mean(dim=(2, 3)))
            return self.fc(torch.cat([a.mean(dim=(2, 3)), (y * y).mean(dim=(2, 3))], 1))

    def two_branches():
        return TwoConsumers(False).eval(), (3, 16, 16)

    def skip_around_batchnorm():
        return TwoConsumers(True).eval(), (3, 16, 16)

    class Shared(nn.Module):  # one conv called twice: a weight shared by two layers
        def __init__(self):
            super().__init__()
            torch.manual_seed(29)
            self.stem, self.conv = nn.Conv2d(3, 8, 3, padding=1), nn.Conv2d(8, 8, 3, padding=1)
            self.fc = nn.Linear(8, 6)

        def forward(self, x):
            y = self.conv(torch.relu(self.conv(torch.relu(self.stem(x)))))
            return self.fc(y.mean(dim=(2, 3)))

    def shared():
        return Shared().eval(), (3, 16, 16)

    class PermutedLinear(nn.Module):  # a Linear on a permuted tensor: a batched matmul
        def __init__(self):
            super().__init__()
            torch.manual_seed(30)
            self.conv, self.mix, self.fc = nn.Conv2d(3, 8, 3), nn.Linear(8, 8), nn.Linear(8, 6)

        def forward(self, x):
            y = self.mix(self.conv(x).permute(0, 2, 3, 1)).permute(0, 3, 1, 2)
            return self.fc(torch.relu(y).mean(dim=(2, 3)))

    def permuted_linear():
        return PermutedLinear().eval(), (3, 16, 16)

    class SharedWeight(nn.Module):  # two convs sharing one weight, or one conv under 2 names
        def __init__(self, alias):
            super().__init__()
            torch.manual_seed(31)
            self.stem, self.a = nn.Conv2d(3, 8, 3, padding=1), nn.Conv2d(8, 8, 3, padding=1)
            self.b = self.a if alias else nn.Conv2d(8, 8, 3, padding=1)
            self.b.weight = self.a.weight
            self.fc = nn.Linear(8, 6)

        def forward(self, x):
            y = self.b(torch.relu(self.a(torch.relu(self.stem(x)))))
            return self.fc(y.mean(dim=(2, 3)))

    def shared_weight():
        return SharedWeight(False).eval(), (3, 16, 16)

    def aliased_module():
        return SharedWeight(True).eval(), (3, 16, 16)

    class OtherProducts(nn.Module):  # ops the export names like convs and matmuls, an einsum
        def __init__(self):
            super().__init__()
            torch.manual_seed(32)
            self.conv, self.up = nn.Conv2d(3, 8, 3), nn.ConvTranspose2d(8, 8, 2, stride=2)
            self.line, self.fc = nn.Conv1d(8, 8, 3), nn.Linear(8, 6)
            self.mix = nn.Parameter(torch.randn(8, 8) / 3)

        def forward(self, x):
            y = self.up(torch.relu(self.conv(x))).flatten(2)
            h = torch.einsum("nc,cd->nd", self.line(y).mean(-1), self.mix)
            return self.fc(h + (h @ h.t()).mean(1, keepdim=True))

    def other_products():
        return OtherProducts().eval(), (3, 16, 16)
""")


def write_models(folder, text):
    path = folder / "models.py"
    path.write_text(text)
    return path


def cli_run(tmp_path, *args):
    """``qbench run`` on 2 calibration and 2 evaluation images, batch 2, its cache and
    reports under ``tmp_path`` (``cal``, ``rep``)."""
    dirs = ["--cache-dir", str(tmp_path / "cal"), "--reports-dir", str(tmp_path / "rep")]
    return main(["run", *dirs, "--batch-size", "2", "--calib-size", "2", "--eval-size", "2", *args])


def layer_run(tmp_path, *args):
    """``qbench run`` on ``--data synthetic``: 4 calibration and 8 evaluation images, batch
    2, its cache and reports under ``tmp_path`` (``cal``, ``rep``)."""
    dirs = ["--cache-dir", str(tmp_path / "cal"), "--reports-dir", str(tmp_path / "rep")]
    sizes = ["--batch-size", "2", "--calib-size", "4", "--eval-size", "8"]
    return main(["run", *dirs, *sizes, "--data", "synthetic", *args])


def run_report(tmp_path):
    """report.json of the one run under ``tmp_path / "rep"``."""
    (folder,) = (tmp_path / "rep").iterdir()
    return json.loads((folder / "report.json").read_text())


def refused(capsys, tmp_path, *texts):
    """The run printed one error line holding ``texts`` and wrote no cache and no report."""
    err = capsys.readouterr().err
    line = [x for x in err.splitlines() if x.startswith("qbench: error:")]
    assert len(line) == 1 and all(t in line[0] for t in texts), err
    assert "Traceback" not in err
    assert not list(tmp_path.glob("cal/*")) and not list(tmp_path.glob("rep/*"))
    return line[0]


def photos(folder, n, size=(40, 52)):
    """``n`` noise photos ``p<i>.png`` in ``folder``, distinct from those of other folders
    (seeded by the folder's path): a run refuses two images with the same pixels."""
    folder.mkdir(parents=True, exist_ok=True)
    rng = np.random.default_rng(zlib.crc32(str(folder).encode()))
    for i in range(n):
        Image.fromarray(rng.integers(0, 256, (*size, 3), dtype=np.uint8)).save(folder / f"p{i}.png")
    return [f"p{i}.png" for i in range(n)]


def labels_csv(folder, rows):
    with open(folder / "labels.csv", "w", newline="") as f:
        csv.writer(f).writerows([("file", "label"), *rows])
