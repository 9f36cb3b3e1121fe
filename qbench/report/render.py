"""Reports: a JSON document for machines and the same facts as tables for people.

``report.json`` carries ``schema_version``; ``report.md`` and the console show tabulate tables.
Both files are written atomically under ``reports/<timestamp>-<model>-<target>/``.

Its data is a ``results.RunResult`` (schema versions: see ``results``).
"""

import datetime as dt
import json
import math
import platform
import re
from pathlib import Path

from tabulate import tabulate

from .. import __version__
from ..core.atomic import to_json, write_folder
from ..core.words import plural
from ..measure.provenance import definition, qbench_commit
from ..measure.results import DataInfo, ModelInfo, RunResult
from ..measure.timing import describe
from ..model.graph import op_counts

RUNNER_TITLES = {
    "pytorch_fp32": "PyTorch FP32 (eager)",
    "tvm_fp32": "TVM FP32",
    "tvm_int8": "TVM INT8",
}


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


def environment_line(env):
    """The environment in words: CPU, threads, versions, the target (JSON) and, when
    recorded, the timing protocol and its settings (``timing.describe``)."""
    target = env["target"]
    mcpu = f", LLVM mcpu {target['mcpu']}" if target.get("mcpu") else ""
    timed = f". Timing: {describe(env['timing'])}" if env.get("timing") else ""
    if env.get("remote"):
        timed = f". TVM builds run on {env['remote']['device']}, timed there{timed}"
    return (
        f"Environment: CPU {env['cpu']} ({env['machine']}{mcpu}), {env['threads']} threads; "
        f"qbench {env['qbench']}, TVM {env['tvm']}, PyTorch {env['torch']}, Python "
        f"{env['python']}; target `{json.dumps(target, sort_keys=True)}`{timed}"
    )


def cpu_name():
    """The CPU model name from /proc/cpuinfo (else the platform's processor string)."""
    try:
        text = Path("/proc/cpuinfo").read_text()
        return re.search(r"model name\s*:\s*(.*)", text).group(1).strip()
    except (OSError, AttributeError):
        return platform.processor() or "unknown"


def build_report(prepared, results, wall_s, speed, verdict, timing):
    """The run's ``results.RunResult`` from its ``prepared.Prepared`` (built: its tuning has
    ``kernels``; see ``pipeline.run``), its ``RunnerResult``s, wall time (s), ``Speed`` (or
    None), sign-off ``Verdict`` and the timing's record (``timing.record``: the report's
    ``environment["timing"]``)."""
    opts, model, images, split = prepared.opts, prepared.model, prepared.images, prepared.split
    config = {k: v for k, v in vars(opts).items() if k not in ("quant", "policy")}
    config["quant"] = opts.quant.to_dict()
    return RunResult(
        created=dt.datetime.now(dt.timezone.utc).isoformat(timespec="seconds"),
        environment={
            **environment(prepared.target, opts.threads),
            "timing": timing,
            "remote": _remote(prepared.device, opts),
        },
        definition=definition(prepared),
        model=ModelInfo(
            name=model.name,
            weights=model.weights,
            random_weights=model.random_weights,
            input_shape=list(model.input_shape),
            aten_ops=prepared.imported.aten_ops,
        ),
        data=DataInfo(
            source=images.name,
            synthetic=images.synthetic,
            labelled=images.labels is not None,
            calib_size=len(split.calib),
            eval_size=len(split.eval),
            seed=opts.seed,
        ),
        config=config,
        policy=opts.policy,
        precision=_precision(opts.quant),
        calibration=prepared.calibration,
        tuning=prepared.tuning,
        layers=_layers(prepared),
        graph=_graph(prepared.imported.mod, prepared.int8_mod),
        int8_kernels=prepared.int8_kernels,
        results=results,
        diagnosis=prepared.diagnosis,
        wall_time_s=round(wall_s, 2),
        speed=speed,
        signoff=verdict,
    )


def _remote(device, opts):
    """The report's record of the remote device that ran the TVM builds, or None."""
    if device is None:
        return None
    return {
        "rpc": opts.rpc,
        "tracker": opts.rpc_tracker,
        "key": opts.rpc_key,
        "device": device.name,
    }


def _precision(quant):
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
        "kernels), a residual add reading its inputs' uint8 tensors (a downsample conv's "
        "output requantized to its own calibrated uint8), zero padding and max pooling on "
        "uint8; float32 after the others (average pool, concat, the logits), quantized at "
        "the next layer",
    }


def _weight_words(quant):
    if quant.reduce_range:
        return "int8 of 7-bit values ([-63, 63], --reduce-range)"
    return "int8"


def _unaccounted_rows(prepared):
    """Layer-table rows of the model's Conv2d/Linear calls that no graph layer stands for
    (``Prepared.unaccounted``): FP32, with the reason."""
    import torch

    rows = []
    for path, n in prepared.unaccounted:
        sub = _submodule(prepared.model.module, path)
        linear = isinstance(sub, torch.nn.Linear)
        rows.append(
            {
                "index": None,
                "name": path,
                "op": "matmul" if linear else "conv2d",
                "in_channels": getattr(sub, "in_features", getattr(sub, "in_channels", None)),
                "out_channels": getattr(sub, "out_features", getattr(sub, "out_channels", None)),
                "groups": getattr(sub, "groups", 1),
                "reason": f"{n} call(s) exported as an op pattern qbench does not quantize "
                "(no conv2d/matmul with a constant weight in the graph): FP32",
                "nonfinite_excluded": 0,
                "nonfinite_batches": [],
                "dtype": "float32",
                "collapsed_channels": [],
            }
        )
    return rows


def _submodule(module, path):
    try:
        return module.get_submodule(path)
    except AttributeError:
        return None


def _layers(prepared):
    rows = []
    for layer, plan in zip(prepared.layers, prepared.plans, strict=True):
        r = prepared.ranges.get(layer.name)
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
        if plan.quantized:
            sqnr = [s for s in plan.weight.sqnr_db.tolist() if math.isfinite(s)]
            weights = _weight_words(prepared.opts.quant)
            row.update(
                dtype=f"float32 (simulated uint8 x {weights})"
                if prepared.opts.quant.simulate
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
    return rows + _unaccounted_rows(prepared)


def _graph(fp32_mod, int8_mod):
    before, after = op_counts(fp32_mod), op_counts(int8_mod)
    added = {k: after[k] - before.get(k, 0) for k in sorted(after) if after[k] > before.get(k, 0)}
    return {
        "fp32_ops": dict(sorted(before.items())),
        "int8_ops": dict(sorted(after.items())),
        "int8_added_ops": added,
    }


def latency_table(results, fmt, simulated=False):
    """Latency per runner ({name: ``results.RunnerResult``}), ms; how many times slower
    or faster than TVM FP32 it is: the median per-round ratio of the interleaved samples
    (``speed.median_ratio``, the statistic the sign-off and compare judge), not the ratio of
    the medians shown; and, when a runner ran on a remote device, each runner's device.
    ``simulated``: TVM INT8 is fake-quantized FP32."""
    fp32 = results["tvm_fp32"].samples_ms
    rows = []
    for name, entry in results.items():
        lat = entry.latency
        title = RUNNER_TITLES[name]
        if simulated and name == "tvm_int8":  # an FP32 graph: its speed says nothing of INT8
            title, name = f"{title} (SIMULATED: fake-quantized FP32)", "simulated"
        rows.append(
            [
                title,
                f"{lat.median_ms:.2f}",
                f"{lat.p90_ms:.2f}",
                f"{lat.std_ms:.2f}",
                _versus(_per_round(entry.samples_ms, fp32), name),
                entry.device,
            ]
        )
    heads = ["runner", "median (ms)", "p90 (ms)", "std (ms)", "vs TVM FP32 (per round)"]
    heads.append("device")
    if all(entry.device == "host" for entry in results.values()):  # the usual run: no column
        rows, heads = [row[:-1] for row in rows], heads[:-1]
    return tabulate(rows, heads, tablefmt=fmt)


def _per_round(samples, fp32):
    """``speed.median_ratio`` of a runner's samples to TVM FP32's (ms), or None when the
    report holds no paired samples."""
    from ..measure.speed import median_ratio

    if not samples or len(samples) != len(fp32):
        return None
    return float(median_ratio(samples, fp32))


def _versus(ratio, name):
    """A latency ratio to TVM FP32 in words: ``3.00x slower``, ``1.80x faster``, ``1.00x
    (same)`` within half a percent; ``-`` without one."""
    if name == "tvm_fp32":
        return "1.00x (reference)"
    if ratio is None:
        return "-"
    if abs(ratio - 1) < 0.005:
        return "1.00x (same)"
    if ratio < 1:
        return f"{1 / ratio:.2f}x faster"
    return f"{ratio:.2f}x slower" + (": INT8 does not pay off" if name == "tvm_int8" else "")


ACCURACY_COLUMNS = [
    ("top1_agreement", "top-1 agreement"),
    ("decisive_top1_agreement", "decisive top-1 agreement"),
    ("top5_agreement", "top-5 agreement"),
    ("top1_accuracy", "top-1 accuracy"),
    ("top5_accuracy", "top-5 accuracy"),
]
ACCURACY_NOTE = (
    "Agreement: % of images whose top-1 class is PyTorch FP32's (top-5: % of PyTorch's 5 top "
    "classes found in the runner's 5); decisive: near-tie flips (PyTorch FP32's top-1 minus "
    "top-2 softmax probability under the near-tie margin) forgiven; accuracy: % of images "
    "whose label is in the top 1 / 5; "
    "counts in brackets, with the 95 % Clopper-Pearson interval (CI) over the images. max abs "
    "diff in logit units; cosine 1 = same direction."
)


def accuracy_table(report, fmt, note=True):
    """Agreement with PyTorch FP32 and accuracy, as ``87.6 % (629/718)``, and logit error,
    followed (with ``note``) by ``ACCURACY_NOTE`` on how to read them."""
    heads = ["runner"] + [title for _, title in ACCURACY_COLUMNS]
    heads += ["max abs diff (logits)", "cosine", "SQNR (dB)"]
    rows = []
    for name, entry in report.results.items():
        m = entry.metrics
        rows.append(
            [RUNNER_TITLES[name]]
            + [percent_with_counts(m, key) for key, _ in ACCURACY_COLUMNS]
            + [_fmt(m.get(k)) for k in ("max_abs_diff", "cosine", "sqnr_db")]
        )
    table = tabulate(rows, heads, tablefmt=fmt, disable_numparse=True)
    return table + "\n\n" + ACCURACY_NOTE if note else table


def flip_lines(report):
    """Per compared runner, its top-1 flips split into near-ties and decisive ones, e.g.
    ``TVM INT8: 3 flips, 3 near-ties (PyTorch FP32 margin < 0.05), 0 decisive``."""
    lines = []
    for name, entry in report.results.items():
        m = entry.metrics
        if "decisive_flips" not in m:
            continue
        total = m["near_tie_flips"] + m["decisive_flips"]
        lines.append(
            f"{RUNNER_TITLES[name]}: {plural(total, 'flip')} of "
            f"{plural(m['top1_agreement_total'], 'image')}, "
            f"{m['near_tie_flips']} near-ties (PyTorch FP32 margin < {m['near_tie_margin']:g}), "
            f"{m['decisive_flips']} decisive"
        )
    return lines


def decisive_table(report, fmt):
    """The decisive flips (``compare.flips``), one row each: runner, image, PyTorch FP32
    margin, PyTorch's class, the runner's class; None when there are none."""
    rows = [
        [RUNNER_TITLES[name], f.get("image") or f"#{f['index']}", f"{f['margin']:.3f}"]
        + [f["pytorch_class"], f["class"]]
        for name, entry in report.results.items()
        for f in entry.per_image.get("flips", [])
        if f["kind"] == "decisive"
    ]
    if not rows:
        return None
    heads = ["runner", "image", "PyTorch FP32 margin", "PyTorch class", "runner's class"]
    return tabulate(rows, heads, tablefmt=fmt, disable_numparse=True)


def flip_parts(report, fmt):
    """The flips section's parts: one line per runner and the decisive flips' table."""
    lines = flip_lines(report)
    if not lines:
        return []
    bullet = "- " if fmt == "github" else ""
    table = decisive_table(report, fmt)
    return ["\n".join(bullet + line for line in lines)] + ([table] if table else [])


def percent_with_counts(metrics, key):
    """``87.6 % (629/718; CI 85.0-89.9)`` for the fraction ``metrics[key]``, its counts and
    its 95 % interval (where the metrics have one); a top-5 agreement's counts are class
    slots and its interval is over images (``compare.with_counts``): ``95.7 % (67/70
    classes; CI 66.1-99.8 over images)``. ``-`` if absent."""
    if metrics.get(key) is None:
        return "-"
    counts = f"{metrics[f'{key}_count']}/{metrics[f'{key}_total']}"
    slots = key == "top5_agreement"  # counted in class slots, its interval over images
    ci = metrics.get(f"{key}_ci95")
    if ci is not None:  # reports written before intervals have none
        counts += f"{' classes' if slots else ''}; CI {100 * ci[0]:.1f}-{100 * ci[1]:.1f}"
        counts += " over images" if slots else ""
    return f"{100 * metrics[key]:.1f} % ({counts})"


def layer_table(report, fmt):
    heads = [
        "#",
        "layer",
        "op",
        "channels in->out",
        "groups",
        "built dtype",
        "act scale (real units per step)",
        "act zero point",
        "clipped (calibration)",
        "weight SQNR min (dB)",
        "collapsed channels",
        "note",
    ]
    rows = []
    for la in report.layers:
        note = la["reason"]
        if la["nonfinite_excluded"]:
            note += (
                f" {la['nonfinite_excluded']} non-finite values excluded "
                f"(batches {la['nonfinite_batches']})"
            )
        rows.append(
            [
                "-" if la["index"] is None else la["index"],
                la["name"],
                la["op"],
                f"{la['in_channels']}->{la['out_channels']}",
                la["groups"],
                la["dtype"],
                _fmt(la.get("act_scale")),
                la.get("act_zero_point", ""),
                _percent(la.get("clipped_fraction")),
                _fmt(la.get("weight_sqnr_min_db")),
                ",".join(map(str, la["collapsed_channels"])) or "",
                note.strip(),
            ]
        )
    return tabulate(rows, heads, tablefmt=fmt)


def _percent(fraction):
    """A clipped fraction as a percentage ('0.0012 %'), '0 %' for none, '-' when absent."""
    if fraction is None:
        return "-"
    return f"{100 * fraction:.2g} %" if fraction else "0 %"


def _fmt(v):
    if v is None:
        return "-"
    return f"{v:.4g}" if isinstance(v, float) else str(v)


def summary_lines(report):
    m, d, env, cal = report.model, report.data, report.environment, report.calibration
    cache = "hit" if cal["cache_hit"] else "miss"
    weights = (
        "weights: RANDOM (results say nothing about a trained model)"
        if m.random_weights
        else f"weights: {m.weights}"
    )
    data_note = " (SYNTHETIC noise images)" if d.synthetic else ""
    lines = [
        f"model: {m.name}   {weights}",
        f"target: {env['target']}   threads: "
        f"{env['threads']}   batch: {report.config['batch_size']}",
        f"data: {d.source}{data_note}   calibration: {d.calib_size} images "
        f"({cal['mode']}, cache {cache}, weight rounding "
        f"{cal.get('weight_rounding', 'nearest')}, bias correction "
        f"{cal.get('bias_correction', 'off')})"
        f"   evaluation: {d.eval_size} images",
        f"precision: {report.precision['integer_ops']}; between layers "
        f"{report.precision['between_layers']}",
        added_ops_words(report.graph["int8_added_ops"]),
    ]
    t = report.tuning
    used = sum(c.get("tuned", 0) for c in t.get("kernels", {}).values())
    lines.append(
        f"tuning: databases applied: {t['source']} ({t['records']} records in "
        f"{t['database']}, {t['pretuned_records']} pre-tuned records shipped for this target; "
        f"{used} kernels took a record, the others use qbench's kernels and default schedules)"
        if t["source"] != "none"
        else "tuning: none (no records for this target: untuned kernels use qbench's default "
        "schedules; see `qbench tune`)"
    )
    if t.get("kernels"):
        lines.append(
            "kernels by schedule (qbench's hand-scheduled / tuning record / default): "
            + ", ".join(
                f"{name} {c['hand']}/{c['tuned']}/{c['default']}"
                for name, c in t["kernels"].items()
                if c
            )
        )
    lines += speed_lines(report.speed) if report.speed else []
    if report.policy:
        lines.append(policy_line(report.policy))
    int8 = sum(la["dtype"] != "float32" for la in report.layers)
    lines.append(f"layers built in INT8: {int8} of {len(report.layers)}")
    lines.append(int8_kernels_line(report.int8_kernels))
    failed = [c.name for c in report.signoff.failed]
    lines.append(
        f"sign-off: {report.signoff.verdict}"
        + (f" (failed: {'; '.join(failed)})" if failed else "")
        + (f", NOT SHOWN: {unshown_words(report.signoff)}" if report.signoff.unshown else "")
    )
    return lines


def unshown_words(signoff):
    """What the images of a run cannot show, e.g. ``14 images cannot show INT8 top-1
    agreement >= 97.0 % (at least 122 needed, 95 % Clopper-Pearson)``."""
    parts = [f"{c.name} {c.op} {100 * c.limit:.1f} % ({_unshown_why(c)})" for c in signoff.unshown]
    sample = signoff.unshown[0].sample
    return f"{plural(sample, 'image')} cannot show {'; '.join(parts)}, 95 % Clopper-Pearson"


def _unshown_why(check):
    """Why a passed agreement check is not shown: too few images, or too many misses."""
    if check.needed is None:
        return "no number can"
    if check.sample < check.needed:
        return f"at least {check.needed} needed"
    return f"95 % CI {100 * check.ci_low:.1f}-{100 * check.ci_high:.1f} % reaches below"


def policy_line(policy):
    """The ``--policy`` file and the limits it set, e.g. ``policy: team.toml (sha256
    1a2b3c4d5e6f): min_int8_speedup 1.1 (models.m.targets.llvm)``."""
    set_ = ", ".join(
        f"{name} {entry['value']:g} ({entry['from']})" for name, entry in policy["limits"].items()
    )
    flags = policy["overridden_by_flags"]
    unmatched = policy.get("unmatched")
    return (
        f"policy: {policy['path']} (sha256 {policy['sha256'][:12]}): {set_ or 'no limits'}"
        + (f"; overridden by flags: {', '.join(flags)}" if flags else "")
        + (f"; WARNING: {unmatched}" if unmatched else "")
    )


def speed_lines(speed):
    """The latency ratios (a ``results.Speed``) with their confidence intervals, and the
    NOISY verdict, e.g. ``speed (median per-round latency ratio, runners interleaved): TVM INT8 /
    TVM FP32 0.625 (95 % CI 0.610-0.640); ...``."""
    parts = []
    for key, r in speed.ratios.items():
        num, den = (RUNNER_TITLES[name] for name in key.split("/"))
        parts.append(
            f"{num} / {den} {r.ratio:.3f} ({100 * r.confidence:g} % CI "
            f"{r.ci_low:.3f}-{r.ci_high:.3f})"
        )
    lines = [f"speed (median per-round latency ratio, runners interleaved): {'; '.join(parts)}"]
    if speed.noisy:
        lines.append(
            f"timing: NOISY ({speed.noisy_reason}; the machine is busy or throttling), "
            "compare latencies with care"
        )
    return lines


OP_WORDS = {  # Relax op: (one, several)
    "relax.astype": ("dtype cast", "dtype casts"),
    "relax.quantize": ("quantize", "quantizes"),
    "relax.dequantize": ("dequantize", "dequantizes"),
    "relax.nn.pad": ("pad", "pads"),
    "relax.multiply": ("multiply", "multiplies"),
    "relax.subtract": ("subtraction", "subtractions"),
    "relax.add": ("addition", "additions"),
    "relax.call_tir": ("kernel call", "kernel calls"),
}


def added_ops_words(added):
    """The ops the INT8 rewrite added, in words, e.g. ``INT8 graph adds 12 quantizes, 12 dtype
    casts, 1 pad``, most frequent first (ops without words keep their Relax name).

    Args:
        added: {Relax op name: count added} (``RunResult.graph["int8_added_ops"]``).
    """
    if not added:
        return "INT8 graph adds no ops to the FP32 graph"
    ordered = sorted(added.items(), key=lambda kv: (-kv[1], kv[0]))
    words = []
    for op, n in ordered:
        short = op.removeprefix("relax.")
        words.append(f"{n} {OP_WORDS.get(op, (short, short))[n != 1]}")
    return (
        "INT8 graph adds "
        + ", ".join(words)
        + " (ops the FP32 graph lacks; conv2d/matmul themselves are replaced, not added)"
    )


UNIT_FORMATS = {  # unit: (scale, suffix, fewest decimals)
    "fraction": (100, " %", 1),
    "points": (1, " points", 1),
    "dB": (1, " dB", 1),
    "cosine": (1, "", 3),
    "speed-up": (1, "x", 2),
    "ms": (1, " ms", 2),
}


def check_value_and_limit(check):
    """A sign-off check's value and limit as text, in the unit of the limit.

    Fractions are shown as %, accuracy drops in percentage points, SQNR in dB, cosines as
    plain numbers, with as many decimals as it takes (up to 3 more than the fewest) to tell
    a failing value from its limit and to show a non-zero limit as non-zero; speed-ups as
    ``0.62x`` and latencies in ms. A check with a confidence interval (the INT8 speed-up)
    shows it after the value. A check without a value (not applicable, or not computable)
    shows its ``detail``.

    Args:
        check: a ``results.Check``.
    Returns:
        (value text, limit text), e.g. ``("96.43 %", ">= 97.00 %")``.
    """
    unit, value, limit, op = check.unit, check.value, check.limit, check.op
    if unit == "flag":
        shown = "yes" if value else "no"
        detail = check.detail
        return (f"{shown}: {detail}" if detail else shown), "yes"
    if unit not in UNIT_FORMATS:
        return _fmt(int(value) if float(value).is_integer() else value), f"{op} {limit}"
    scale, suffix, fewest = UNIT_FORMATS[unit]
    if value is None:
        return check.detail, f"{op} {scale * limit:.{fewest}f}{suffix}"
    for decimals in range(fewest, fewest + 4):
        v, lim = f"{scale * value:.{decimals}f}", f"{scale * limit:.{decimals}f}"
        told_apart = v != lim or value == limit
        if told_apart and (float(lim) != 0 or limit == 0):  # a limit of 0.001 is not "0.00"
            break
    v += suffix
    if check.ci_low is not None:
        low, high = (
            f"{scale * b:.{fewest if scale == 1 else 1}f}" for b in (check.ci_low, check.ci_high)
        )
        v += f" ({100 * check.confidence:g} % CI {low}-{high}{suffix if scale != 1 else ''})"
    return v, f"{op} {lim}{suffix}"


def int8_kernels_line(info):
    """The CPU class and the kernel path of every INT8 layer, e.g. ``CPU class AVX2; INT8
    kernels: conv2d avx2 33, conv2d depthwise 16, matmul avx2 1``."""
    paths = ", ".join(f"{path} {n}" for path, n in info["paths"].items()) or "none"
    return f"CPU class {info['cpu_class']}; INT8 layers by kernel: {paths}"


def signoff_table(verdict, fmt):
    """One row per sign-off check of ``verdict`` (a ``results.Verdict``): value and limit in
    the same unit, ok, FAIL or n/a (not applicable)."""
    rows = []
    for c in verdict.checks:
        value, limit = check_value_and_limit(c)
        result = {True: "ok", False: "FAIL", None: "n/a"}[c.passed]
        if c.unshown:
            result = f"ok, not shown ({c.sample} images; {_unshown_why(c)})"
        rows.append([c.name, value, limit, result])
    heads = ["sign-off check", "value", "limit", "result"]
    return tabulate(rows, heads, tablefmt=fmt, disable_numparse=True)


def layers_preview_table(layers, reasons, fmt):
    """The quantizable layers of an imported model, for ``qbench layers``.

    Args:
        layers: ``graph.Layer`` list.
        reasons: per layer, why it stays FP32, or "" when it would run in INT8.
        fmt: tabulate format, e.g. ``"simple"``.
    """
    rows = [
        [
            la.index,
            la.name,
            la.op,
            " x ".join(str(d) for d in la.weight.shape),
            f"{la.in_channels}->{la.out_channels}",
            la.groups,
            f"FP32: {reason}" if reason else "INT8",
        ]
        for la, reason in zip(layers, reasons, strict=True)
    ]
    heads = ["#", "layer", "op", "weight shape", "channels in->out", "groups", "would run in"]
    return tabulate(rows, heads, tablefmt=fmt, disable_numparse=True)


def render_console(report):
    return "\n\n".join(
        [
            "\n".join(summary_lines(report) + _fallback_lines(report)),
            latency_table(report.results, "simple", report.simulated),
            accuracy_table(report, "simple"),
            signoff_table(report.signoff, "simple"),
        ]
    )


def render_markdown(report):
    parts = [
        f"# qbench report: {report.model.name} on {report.environment['target']['kind']}",
        "\n".join(f"- {line}" for line in summary_lines(report)),
        "## Latency (one batch)",
        latency_table(report.results, "github", report.simulated),
        "## Agreement with PyTorch FP32 and accuracy",
        accuracy_table(report, "github"),
        *(["## Flips"] + flip_parts(report, "github") if flip_lines(report) else []),
        "## Sign-off",
        signoff_table(report.signoff, "github"),
        "## Layers",
        layer_table(report, "github"),
        *_diagnosis_parts(report),
        environment_line(report.environment),
        f"Wall time: {report.wall_time_s} s",
    ]
    return "\n\n".join(parts) + "\n"


def _fallback_lines(report):
    from .diagnosis import summary

    return summary(report.diagnosis)[1:] if report.diagnosis else []


def _diagnosis_parts(report):
    """The Markdown of the diagnosis (``--diagnose``, ``--accuracy-target``): its summary and
    fallback, the most sensitive layers, their input histograms and, with ``--diagnose``,
    every layer's row; nothing if the run had none."""
    from .diagnosis import LEGEND, TOP, layer_table, path_table, sensitive_table, summary

    diagnosis = report.diagnosis
    if not diagnosis:
        return []
    lines = "\n".join(f"- {line}" for line in summary(diagnosis))
    parts = [f"## {diagnosis_title(diagnosis)}", lines]
    if "stop" in diagnosis.get("fallback", {}):
        parts += ["FP32 fallback path:", path_table(diagnosis["fallback"])]
    parts += [f"The {TOP} most sensitive layers:"]
    parts += [sensitive_table(diagnosis)]
    parts += [f"![input histogram]({png})" for png in diagnosis.get("plots", [])]
    if diagnosis.get("plots"):
        parts += ["### Every INT8 layer", layer_table(diagnosis["layers"]), LEGEND]
    return parts


def diagnosis_title(diagnosis):
    """``Diagnosis``, plus ``and FP32 fallback`` when it chose one."""
    return "Diagnosis" + (" and FP32 fallback" if diagnosis.get("fallback") else "")


def write_reports(report, root="reports", attachments=None):
    """Write ``report.json`` (``report.to_json()``; ``report`` is a ``results.RunResult``),
    ``report.md``, ``report.html`` (``html.render_html``) and the
    ``attachments`` ({file name: bytes}, e.g. the diagnosis' PNGs, which report.html
    embeds) into a new timestamped folder, all at once; return the folder."""
    from .html import render_html

    stamp = dt.datetime.now().strftime("%Y%m%d-%H%M%S")
    name = re.sub(r"[^A-Za-z0-9_.-]+", "_", Path(report.model.name).name)
    out = Path(root) / f"{stamp}-{name}-{report.environment['target']['kind']}"
    files = {"report.json": to_json(report.to_json()), "report.md": render_markdown(report)}
    attachments = attachments or {}
    html = render_html(report, attachments)
    return write_folder(out, files | attachments | {"report.html": html})
