"""Reports: a JSON document for machines and the same facts as tables for people.

``report.json`` carries ``schema_version``; ``report.md`` and the console show tabulate tables.
Both files are written atomically under ``reports/<timestamp>-<model>-<target>/``.
"""

import datetime as dt
import math
import platform
import re
from pathlib import Path

from tabulate import tabulate

from . import __version__
from .atomic import to_json, write_folder
from .graph import op_counts

SCHEMA_VERSION = 1
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
        "tvm": tvm.__version__,
        "torch": torch.__version__,
        "python": platform.python_version(),
        "cpu": _cpu_name(),
        "machine": platform.machine(),
        "threads": threads,
        "target": target,
    }


def _cpu_name():
    try:
        text = Path("/proc/cpuinfo").read_text()
        return re.search(r"model name\s*:\s*(.*)", text).group(1).strip()
    except (OSError, AttributeError):
        return platform.processor() or "unknown"


def build_report(ctx, results, wall_s):
    """Assemble the report dict from the run context (see ``pipeline.run``)."""
    opts, model, images, split = ctx["opts"], ctx["model"], ctx["images"], ctx["split"]
    config = {k: v for k, v in vars(opts).items() if k != "quant"}
    config["quant"] = opts.quant.to_dict()
    return {
        "schema_version": SCHEMA_VERSION,
        "created": dt.datetime.now(dt.timezone.utc).isoformat(timespec="seconds"),
        "environment": environment(ctx["target"], opts.threads),
        "model": {
            "name": model.name,
            "weights": model.weights,
            "random_weights": model.random_weights,
            "input_shape": list(model.input_shape),
            "aten_ops": ctx["imported"].aten_ops,
        },
        "data": {
            "source": images.name,
            "synthetic": images.synthetic,
            "labelled": images.labels is not None,
            "calib_size": len(split.calib),
            "eval_size": len(split.eval),
            "seed": opts.seed,
        },
        "config": config,
        "precision": {
            "integer_ops": "conv2d, matmul: uint8 x int8 -> int32"
            + (" (SIMULATED: fake-quantized FP32)" if opts.quant.simulate else ""),
            "between_layers": "float32 (dequantize, bias, activation, pool, add, "
            "concat), quantized again at the next layer",
        },
        "calibration": ctx["calibration"],
        "tuning": ctx["tuning"],
        "layers": _layers(ctx),
        "graph": _graph(ctx["imported"].mod, ctx["int8_mod"]),
        "results": results,
        "wall_time_s": round(wall_s, 2),
    }


def _layers(ctx):
    rows = []
    for layer, plan in zip(ctx["layers"], ctx["plans"], strict=True):
        r = ctx["ranges"].get(layer.name)
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
            row.update(
                dtype="float32 (simulated int8)"
                if ctx["opts"].quant.simulate
                else "uint8 x int8 -> int32",
                act_scale=plan.act.scale,
                act_zero_point=plan.act.zero_point,
                act_range=[r.lo, r.hi],
                observed_range=[r.observed_min, r.observed_max],
                weight_sqnr_min_db=min(sqnr) if sqnr else None,
                collapsed_channels=plan.weight.collapsed,
            )
        else:
            row.update(dtype="float32", collapsed_channels=[])
        rows.append(row)
    return rows


def _graph(fp32_mod, int8_mod):
    before, after = op_counts(fp32_mod), op_counts(int8_mod)
    added = {k: after[k] - before.get(k, 0) for k in sorted(after) if after[k] > before.get(k, 0)}
    return {
        "fp32_ops": dict(sorted(before.items())),
        "int8_ops": dict(sorted(after.items())),
        "int8_added_ops": added,
    }


def latency_table(report, fmt):
    res = report["results"]
    fp32 = res["tvm_fp32"]["latency"]["median_ms"]
    rows = []
    for name, entry in res.items():
        lat = entry["latency"]
        ratio = lat["median_ms"] / fp32
        mark = " SLOWER than TVM FP32" if name == "tvm_int8" and ratio > 1 else ""
        rows.append(
            [
                RUNNER_TITLES[name],
                f"{lat['median_ms']:.2f}",
                f"{lat['p90_ms']:.2f}",
                f"{lat['std_ms']:.2f}",
                f"{ratio:.2f}{mark}",
            ]
        )
    heads = ["runner", "median ms", "p90 ms", "std ms", "ratio to TVM FP32"]
    return tabulate(rows, heads, tablefmt=fmt)


def accuracy_table(report, fmt):
    heads = [
        "runner",
        "top-1 agr",
        "top-5 agr",
        "top-1 acc",
        "top-5 acc",
        "max |diff|",
        "cosine",
        "SQNR dB",
    ]
    keys = [
        "top1_agreement",
        "top5_agreement",
        "top1_accuracy",
        "top5_accuracy",
        "max_abs_diff",
        "cosine",
        "sqnr_db",
    ]
    rows = []
    for name, entry in report["results"].items():
        m = entry["metrics"]
        rows.append([RUNNER_TITLES[name]] + [_fmt(m.get(k)) for k in keys])
    return tabulate(rows, heads, tablefmt=fmt)


def layer_table(report, fmt):
    heads = [
        "#",
        "layer",
        "op",
        "ch in->out",
        "groups",
        "built dtype",
        "act scale",
        "zp",
        "w SQNR min dB",
        "collapsed ch",
        "note",
    ]
    rows = []
    for la in report["layers"]:
        note = la["reason"]
        if la["nonfinite_excluded"]:
            note += (
                f" {la['nonfinite_excluded']} non-finite values excluded "
                f"(batches {la['nonfinite_batches']})"
            )
        rows.append(
            [
                la["index"],
                la["name"],
                la["op"],
                f"{la['in_channels']}->{la['out_channels']}",
                la["groups"],
                la["dtype"],
                _fmt(la.get("act_scale")),
                la.get("act_zero_point", ""),
                _fmt(la.get("weight_sqnr_min_db")),
                ",".join(map(str, la["collapsed_channels"])) or "",
                note.strip(),
            ]
        )
    return tabulate(rows, heads, tablefmt=fmt)


def _fmt(v):
    if v is None:
        return "-"
    return f"{v:.4g}" if isinstance(v, float) else str(v)


def summary_lines(report):
    m, d, s = report["model"], report["data"], report["signoff"]
    cache = "hit" if report["calibration"]["cache_hit"] else "miss"
    weights = (
        "weights: RANDOM (results say nothing about a trained model)"
        if m["random_weights"]
        else f"weights: {m['weights']}"
    )
    data_note = " (SYNTHETIC noise images)" if d["synthetic"] else ""
    lines = [
        f"model: {m['name']}   {weights}",
        f"target: {report['environment']['target']}   threads: "
        f"{report['environment']['threads']}   batch: {report['config']['batch_size']}",
        f"data: {d['source']}{data_note}   calibration: {d['calib_size']} images "
        f"({report['calibration']['mode']}, cache {cache})"
        f"   evaluation: {d['eval_size']} images",
        f"precision: {report['precision']['integer_ops']}; between layers "
        f"{report['precision']['between_layers']}",
        f"INT8 graph added ops: {report['graph']['int8_added_ops']}",
    ]
    t = report["tuning"]
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
    if any(e["latency"]["noisy"] for e in report["results"].values()):
        lines.append(
            "timing: NOISY (std above a quarter of the median; the machine is busy "
            "or throttling), compare latencies with care"
        )
    int8 = sum(la["dtype"] != "float32" for la in report["layers"])
    lines.append(f"layers built in INT8: {int8} of {len(report['layers'])}")
    failed = [c["name"] for c in s["checks"] if not c["passed"]]
    lines.append(
        f"sign-off: {s['verdict']}" + (f" (failed: {'; '.join(failed)})" if failed else "")
    )
    return lines


def signoff_table(report, fmt):
    rows = [
        [c["name"], _fmt(c["value"]), f"{c['op']} {c['limit']}", "ok" if c["passed"] else "FAIL"]
        for c in report["signoff"]["checks"]
    ]
    return tabulate(rows, ["sign-off check", "value", "limit", "result"], tablefmt=fmt)


def render_console(report):
    return "\n\n".join(
        [
            "\n".join(summary_lines(report)),
            latency_table(report, "simple"),
            accuracy_table(report, "simple"),
            signoff_table(report, "simple"),
        ]
    )


def render_markdown(report):
    parts = [
        f"# qbench report: {report['model']['name']} on {report['environment']['target']['kind']}",
        "\n".join(f"- {line}" for line in summary_lines(report)),
        "## Latency (one batch)",
        latency_table(report, "github"),
        "## Agreement with PyTorch FP32 and accuracy",
        accuracy_table(report, "github"),
        "## Sign-off",
        signoff_table(report, "github"),
        "## Layers",
        layer_table(report, "github"),
        f"Environment: {report['environment']}",
        f"Wall time: {report['wall_time_s']} s",
    ]
    return "\n\n".join(parts) + "\n"


def write_reports(report, root="reports"):
    """Write ``report.json`` and ``report.md`` into a new timestamped folder; return the folder."""
    stamp = dt.datetime.now().strftime("%Y%m%d-%H%M%S")
    name = re.sub(r"[^A-Za-z0-9_.-]+", "_", Path(report["model"]["name"]).name)
    out = Path(root) / f"{stamp}-{name}-{report['environment']['target']['kind']}"
    return write_folder(out, {"report.json": to_json(report), "report.md": render_markdown(report)})
