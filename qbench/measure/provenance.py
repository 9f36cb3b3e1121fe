"""What defines a run (for baselines) and which qbench source produced it.

A run's *definition* is everything that, when changed, makes two runs' results not
comparable (asv's rule: a changed benchmark definition is a new benchmark). Its ``digest``
is the sha256 of the definition's canonical JSON (sorted keys, no spaces).
"""

import hashlib
import json
import subprocess
from pathlib import Path

import qbench

from .. import __version__
from .timing import PROTOCOL

SOURCE_ROOT = Path(qbench.__file__).resolve().parent.parent  # the folder holding qbench/


def definition(model, digests, quant, batch_size, target):
    """The report's ``definition``: model, its graph, weights, data and labels,
    preprocessing, quantization config, batch size, target, qbench and TVM versions, and
    their ``digest``.

    Args:
        model: the ``zoo.LoadedModel`` run.
        digests: {"graph": what the model computes (``frontend.graph_digest``: the same
            weights in another ``forward`` are another model), "data": sha256 hex of the
            decoded calibration then evaluation images, in order
            (``ImageSet.content_digest``), "labels": sha256 hex of the evaluation labels
            (``labels_digest``), or None for unlabelled data}.
        quant: the ``QuantConfig`` as built.
        batch_size: images per batch (N).
        target: the TVM target dict.
    Returns:
        dict: ``model`` (name), ``graph_digest``, ``weights_digest`` (sha256 hex of the
        state dict), ``data_digest``, ``labels_digest``, ``input_shape`` ([C, H, W]),
        ``preprocess`` (``zoo.Preprocess.as_dict``: resize, crop, mean, std, channels[,
        interpolation]),
        ``quant`` (``QuantConfig.to_dict()``),
        ``batch_size`` (images), ``target``, ``qbench`` and ``tvm`` (versions), ``timing``
        (the timing protocol, ``timing.PROTOCOL``), ``digest``.
    """
    import tvm

    fields = {
        "model": model.name,
        "graph_digest": digests["graph"],
        "weights_digest": model.weights_digest,
        "data_digest": digests["data"],
        "labels_digest": digests["labels"],
        "input_shape": list(model.input_shape),
        "preprocess": model.preprocess.as_dict(),
        "quant": quant.to_dict(),
        "batch_size": batch_size,
        "target": target,
        "qbench": __version__,
        "tvm": tvm.__version__,
        "timing": PROTOCOL,
    }
    return {**fields, "digest": digest(fields)}


def labels_digest(labels):
    """sha256 hex of a run's evaluation labels (ints, in order), or None without labels:
    changed labels make accuracies incomparable though the images are the same."""
    if labels is None:
        return None
    return hashlib.sha256(json.dumps([int(x) for x in labels]).encode()).hexdigest()


def digest(fields):
    """sha256 (hex) of the canonical JSON of ``fields`` (a dict without ``digest``)."""
    text = json.dumps(fields, sort_keys=True, separators=(",", ":"))
    return hashlib.sha256(text.encode()).hexdigest()


def qbench_commit(root=SOURCE_ROOT):
    """``git rev-parse HEAD`` of the qbench source tree, plus ``-dirty`` when a tracked file
    has uncommitted changes; None when ``root`` is not the top of a git checkout (an
    installed package) or git is missing."""
    top = _git(root, "rev-parse", "--show-toplevel")
    if top is None or Path(top).resolve() != Path(root).resolve():
        return None
    head = _git(root, "rev-parse", "HEAD")
    dirty = _git(root, "status", "--porcelain", "--untracked-files=no")
    return None if head is None else head + ("-dirty" if dirty else "")


def _git(root, *args):
    """stdout of ``git -C root ARGS`` stripped, or None when git fails or is missing."""
    try:
        done = subprocess.run(
            ["git", "-C", str(root), *args], capture_output=True, text=True, timeout=10
        )
    except (OSError, subprocess.TimeoutExpired):
        return None
    return done.stdout.strip() if done.returncode == 0 else None
