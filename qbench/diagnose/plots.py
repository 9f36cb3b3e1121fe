"""Histograms of the FP32 inputs of chosen layers, with the calibrated range marked
(matplotlib PNG)."""

import io

import numpy as np
import torch

from ..quantize.fakequant import quantized

BINS = 256


def input_histograms(model, fakes, batches, names):
    """Counts of each named layer's FP32 input values over ``batches``.

    Returns:
        dict name -> (counts int64 (BINS,), edges float64 (BINS + 1,)), the edges spanning
        the data and the calibrated range together.
    """
    chosen = [f for f in fakes if f.name in names]
    span = {f.name: [min(f.lo, 0.0), max(f.hi, 0.0)] for f in chosen}
    with torch.no_grad(), quantized(model, fakes, set()) as (run, seen):
        for x in batches:  # first pass: the data's extent
            run(x)
            for f in chosen:
                values = seen[f.name][0]
                span[f.name][0] = min(span[f.name][0], float(values.min()))
                span[f.name][1] = max(span[f.name][1], float(values.max()))
        counts = {f.name: np.zeros(BINS, np.int64) for f in chosen}
        for x in batches:
            run(x)
            for f in chosen:
                values = seen[f.name][0].numpy().ravel()
                counts[f.name] += np.histogram(values, BINS, tuple(span[f.name]))[0]
    edges = {n: np.linspace(*span[n], BINS + 1) for n in span}
    return {n: (counts[n], edges[n]) for n in span}


def histogram_png(name, counts, edges, lo, hi, clipped):
    """A PNG (bytes) of one layer's input histogram (log count) with the values beyond which
    quantization clamps (``lo``, ``hi``) marked, and the clipped fraction in the title."""
    import matplotlib

    matplotlib.use("Agg")
    from matplotlib import pyplot as plt

    fig, ax = plt.subplots(figsize=(7, 3.5), dpi=100)
    ax.stairs(counts, edges, fill=True, color="tab:blue")
    for value in (lo, hi):
        ax.axvline(value, color="tab:red", linestyle="--")
    ax.set_yscale("log")
    ax.set_xlabel("FP32 input value (red: calibrated range)")
    ax.set_ylabel("count")
    ax.set_title(f"{name}: clipped {100 * clipped:.3f} %", fontsize=10)
    fig.tight_layout()
    out = io.BytesIO()
    fig.savefig(out, format="png")
    plt.close(fig)
    return out.getvalue()
