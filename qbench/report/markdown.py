"""``report.md`` and the console: the report's summary lines and tables in Markdown or
plain text."""

from .diagnosis import diagnosis_title
from .lines import environment_line, summary_lines
from .tables import (
    accuracy_table,
    flip_lines,
    flip_parts,
    latency_table,
    layer_table,
    signoff_table,
)


def render_console(report):
    return "\n\n".join(
        [
            "\n".join(summary_lines(report) + _fallback_lines(report)),
            latency_table(report.results, "simple", report.simulated, report.unavailable),
            accuracy_table(report, "simple"),
            signoff_table(report.signoff, "simple"),
        ]
    )


def render_markdown(report):
    parts = [
        f"# qbench report: {report.model.name} on {report.environment['target']['kind']}",
        "\n".join(f"- {line}" for line in summary_lines(report)),
        "## Latency (one batch)",
        latency_table(report.results, "github", report.simulated, report.unavailable),
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

    return summary(report.diagnosis)[1:] if report.diagnosis is not None else []


def _diagnosis_parts(report):
    """The Markdown of the diagnosis (``--diagnose``, ``--accuracy-target``): its summary and
    fallback, the most sensitive layers, their input histograms and, with ``--diagnose``,
    every layer's row; nothing if the run had none."""
    from .diagnosis import LEGEND, TOP, layer_table, path_table, sensitive_table, summary

    diagnosis = report.diagnosis
    if diagnosis is None:
        return []
    lines = "\n".join(f"- {line}" for line in summary(diagnosis))
    parts = [f"## {diagnosis_title(diagnosis)}", lines]
    if diagnosis.fallback is not None:
        parts += ["FP32 fallback path:", path_table(diagnosis.fallback)]
    parts += [f"The {TOP} most sensitive layers:"]
    parts += [sensitive_table(diagnosis)]
    parts += [f"![input histogram]({png})" for png in diagnosis.plots]
    if diagnosis.plots:
        parts += ["### Every INT8 layer", layer_table(diagnosis.layers), LEGEND]
    return parts
