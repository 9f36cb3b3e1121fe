"""The parts of a run's report that the report stage derives: the environment, the
precision in words, the layer table and the graph's op counts (``pipeline.record`` joins
them with the results into a ``RunResult``)."""

import math
import platform
import re
from pathlib import Path

from .. import __version__
from ..measure.provenance import qbench_commit
from ..model.graph import op_counts, range_owner


def environment(target, threads):
    import torch
    import tvm

    return {
        "qbench": __version__,
        "qbench_commit": qbench_commit(),
        "tvm": tvm.__version__,
        "torch": torch.__version__,
        "python": platform.python_version(),
        "cpu": cpu_name(),
        "machine": platform.machine(),
        "threads": threads,
        "target": target,
    }


def cpu_name():
    """The CPU model name from /proc/cpuinfo (else the platform's processor string)."""
    try:
        text = Path("/proc/cpuinfo").read_text()
        return re.search(r"model name\s*:\s*(.*)", text).group(1).strip()
    except (OSError, AttributeError):
        return platform.processor() or "unknown"


def precision(quant):
    """The report's words for the INT8 graph's arithmetic (``precision``) under ``quant``
    (``QuantConfig``)."""
    if quant.simulate:
        return {
            "integer_ops": "conv2d, matmul: SIMULATED (fake-quantized FP32, uint8 x "
            f"{_weight_words(quant)})",
            "between_layers": "float32 (quantized and dequantized at each layer's input)",
        }
    return {
        "integer_ops": f"conv2d, matmul: uint8 x {_weight_words(quant)} -> int32; where the "
        "output goes only "
        "through bias and ReLU/ReLU6 to INT8 layers, integer requantize to uint8 (bias in "
        "int32, one float32 multiplier per channel, round half to even, zero point, "
        "activation as clamp: FBGEMM's scheme; in the conv's kernel on qbench's CPU "
        "kernels); elsewhere rescaled to float32",
        "between_layers": "uint8 from one such layer to the next (NCHW16c between qbench's "
        "kernels, NCHW64c between AMX kernels on multiples of 64 channels), a residual add "
        "reading its inputs' uint8 tensors (a downsample conv's output requantized to its "
        "own calibrated uint8), zero padding, max pooling and "
        "channel concats read by an INT8 conv or pool on uint8, a global average pool that "
        "only one INT8 layer reads in integer (int32 sum, one float32 multiplier to that "
        "layer's uint8); float32 after the others (average pools of windows, other global "
        "pools and concats, the logits), quantized at the next layer",
    }


def _weight_words(quant):
    if quant.reduce_range:
        return "int8 of 7-bit values ([-63, 63], --reduce-range)"
    if quant.fit_pairs:
        return "int8, pairs fitting int16 sums (--fit-pairs)"
    return "int8"


def _fp32_row(name, op, channels, groups, reason):
    """A layer-table row of a weighted product that runs in FP32 outside the layer list."""
    return {
        "index": None,
        "name": name,
        "op": op,
        "in_channels": channels[0],
        "out_channels": channels[1],
        "groups": groups,
        "reason": reason,
        "nonfinite_excluded": 0,
        "nonfinite_batches": [],
        "dtype": "float32",
        "collapsed_channels": [],
    }


def _fp32_rows(fp32, module):
    """Layer-table rows of the weighted products no graph layer stands for, FP32 with the
    reason: ``fp32`` is (``graph.unaccounted_calls``: (module path, calls, op) of the
    PyTorch ``module``, ``graph.products_outside_modules``: (op, count) of products
    outside any module). Each reason starts with its count of calls."""
    unaccounted, outside = fp32
    rows = []
    for path, n, op in unaccounted:
        sub = _submodule(module, path)
        channels = [
            getattr(sub, "in_features", getattr(sub, "in_channels", None)),
            getattr(sub, "out_features", getattr(sub, "out_channels", None)),
        ]
        why = (
            "exported as an op pattern qbench does not quantize (no conv2d/matmul with a "
            "constant weight in the graph)"
            if op in ("conv2d", "matmul")
            else f"no INT8 {op} in qbench (it quantizes conv2d and matmul)"
        )
        rows.append(
            _fp32_row(path, op, channels, getattr(sub, "groups", 1), f"{n} call(s) {why}: FP32")
        )
    for op, n in outside:
        why = "of an activation and a constant weight outside any Conv/Linear module"
        rows.append(
            _fp32_row(f"({op} outside modules)", op, [None, None], 1, f"{n} product(s) {why}: FP32")
        )
    return rows


def _submodule(module, path):
    try:
        return module.get_submodule(path)
    except AttributeError:
        return None


def layer_rows(layers, plans, ranges, quant, fp32, module):
    """The report's layer table: one row per ``graph.Layer`` of ``layers`` with its
    ``LayerPlan`` (``plans``, same order), calibrated ``ranges`` ({layer name:
    ``calibration.Range``}) and the ``QuantConfig`` as built (``quant``), then a row per
    weighted module of ``module`` and per op outside modules that no layer stands for
    (``fp32``: see ``_fp32_rows``). A layer that takes another's input range
    (``graph.range_owner``) shows that range, and names its owner in ``range_from``."""
    rows = []
    for layer, plan in zip(layers, plans, strict=True):
        owner = range_owner(layer, layers)
        r = ranges.get(owner.name)
        row = {
            "index": layer.index,
            "name": layer.name,
            "op": layer.op,
            "in_channels": layer.in_channels,
            "out_channels": layer.out_channels,
            "groups": layer.groups,
            "reason": plan.reason,
            "nonfinite_excluded": r.nonfinite if r else 0,
            "nonfinite_batches": r.nonfinite_batches if r else [],
        }
        if owner is not layer:
            row["range_from"] = owner.name
        if plan.quantized:
            sqnr = [s for s in plan.weight.sqnr_db.tolist() if math.isfinite(s)]
            weights = _weight_words(quant)
            row.update(
                dtype=f"float32 (simulated uint8 x {weights})"
                if quant.simulate
                else f"uint8 x {weights} -> int32",
                act_scale=plan.act.scale,
                act_zero_point=plan.act.zero_point,
                act_range=[r.lo, r.hi],
                observed_range=[r.observed_min, r.observed_max],
                clipped_fraction=r.clipped_fraction,
                weight_sqnr_min_db=min(sqnr) if sqnr else None,
                collapsed_channels=plan.weight.collapsed,
            )
        else:
            row.update(dtype="float32", collapsed_channels=[])
        rows.append(row)
    return rows + _fp32_rows(fp32, module)


def graph_ops(fp32_mod, int8_mod):
    """The report's ``graph``: op counts of the FP32 and INT8 Relax modules and the ops the
    INT8 rewrite added."""
    before, after = op_counts(fp32_mod), op_counts(int8_mod)
    added = {k: after[k] - before.get(k, 0) for k in sorted(after) if after[k] > before.get(k, 0)}
    return {
        "fp32_ops": dict(sorted(before.items())),
        "int8_ops": dict(sorted(after.items())),
        "int8_added_ops": added,
    }
