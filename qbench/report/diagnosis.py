"""The diagnosis report: its record (``DiagnosisReport``, with the FP32 fallback's
``FallbackRecord`` and its ``FallbackStep``s: ``report.json``'s ``diagnosis`` and
diagnose.json), diagnose.md (tables) and diagnose.json, written atomically, plus the FP32
fallback's layer list in the file format ``--skip-layers @FILE`` reads.

The record lives here, in ``report``, because ``result.RunResult`` reads it back; the
``diagnose`` stage fills it (``diagnose.run``)."""

import datetime as dt
import re
from dataclasses import dataclass, fields
from pathlib import Path

from tabulate import tabulate

from ..calibration.calibrate import CalibrationInfo
from ..core.atomic import to_json, write_folder
from ..core.schema import Flat, need, plain
from ..core.words import plural
from ..measure.intervals import images_needed


@dataclass(frozen=True)
class FallbackStep:
    """One step of the FP32 fallback's path (``diagnose.analysis.Step``), judged on the
    held-out images.

    Attributes:
        layer: the layer kept in FP32 at this step, on top of the accepted steps before it;
            None for the first step (every layer INT8).
        accepted: the step was kept (False: its logits SQNR gain was below the record's
            ``min_gain_db``).
        top1_agreement: top-1 agreement with FP32, a fraction in [0, 1].
        top1_agreement_count, top1_agreement_total: the images that agree, and those judged.
        top1_agreement_ci95: its 95 % Clopper-Pearson interval, (low, high) fractions.
        logits_sqnr_db: SQNR of the logits against FP32, dB.
        latency_ms: median TVM INT8 latency of one batch with the accepted steps' layers so
            far in FP32, ms; None for a step not accepted or not timed.
    """

    layer: str | None
    accepted: bool
    top1_agreement: float
    top1_agreement_count: int
    top1_agreement_total: int
    top1_agreement_ci95: tuple
    logits_sqnr_db: float
    latency_ms: float | None = None

    def to_json(self):
        d = {f.name: getattr(self, f.name) for f in fields(self)}
        return d | {"top1_agreement_ci95": list(self.top1_agreement_ci95)}

    @classmethod
    def from_json(cls, d, where):
        """Read the dict back.

        Raises:
            UserError: a field is missing; the message names it.
        """
        older = {"accepted": True, "latency_ms": None}  # steps written before Dec 3 lack them
        values = {f.name: _field(d, f.name, where, older) for f in fields(cls)}
        return cls(**values | {"top1_agreement_ci95": tuple(values["top1_agreement_ci95"])})


@dataclass(frozen=True)
class FallbackLatency(Flat):
    """The fallback's latency cost: median TVM INT8 latency of one batch with every layer
    INT8 (``all_int8``) and with the fallback's layers in FP32 (``with_fallback``), ms,
    timed interleaved on the run's build path."""

    all_int8: float
    with_fallback: float


OLDER_STOP = "not recorded (a report written before 2026-12-03)"


def _field(d, name, where, older):
    """``d[name]``; a field an older layout lacks takes its value in ``older``.

    Raises:
        UserError: any other field is missing; the message names it.
    """
    if name in older and name not in d:
        return older[name]
    return need(d, name, where)


@dataclass(frozen=True)
class FallbackRecord:
    """The FP32 fallback of ``--accuracy-target`` (``diagnose.run.fallback_record``).

    Attributes:
        target: the top-1 agreement with FP32 asked for, a fraction in [0, 1].
        held_out_images: the images it was judged on (never calibration or evaluation ones).
        needed_images: the fewest images whose 95 % Clopper-Pearson interval could show
            ``target`` (``intervals.images_needed``); None: no number can (a target of 1.0).
        min_gain_db: the logits SQNR gain a step needs to be accepted, dB; None in a record
            written before the gain rule (2026-12-03), as ``stop`` is then
            ``OLDER_STOP``.
        reached: the target was reached (or not refuted by the held-out images).
        stop: why the search stopped, in words (``"target reached"``, ...).
        kept_fp32: the layers kept in FP32, in the order chosen.
        steps: the path, one ``FallbackStep`` per layer tried (the first: all INT8).
        latency_ms: the latency cost (``FallbackLatency``); None when no layer was kept in
            FP32 (nothing was timed).
    """

    target: float
    held_out_images: int
    needed_images: int | None
    min_gain_db: float | None
    reached: bool
    stop: str
    kept_fp32: tuple
    steps: tuple
    latency_ms: FallbackLatency | None = None

    @property
    def last_accepted(self):
        """The last accepted step: the chosen build's."""
        return [s for s in self.steps if s.accepted][-1]

    def to_json(self):
        d = {f.name: getattr(self, f.name) for f in fields(self)}
        return d | {
            "kept_fp32": list(self.kept_fp32),
            "steps": [s.to_json() for s in self.steps],
            "latency_ms": None if self.latency_ms is None else self.latency_ms.to_json(),
        }

    @classmethod
    def from_json(cls, d, where="diagnosis.fallback"):
        """Read the dict back.

        Raises:
            UserError: a field is missing; the message names it.
        """
        older = {  # what a record written before the gain rule (2026-12-03) lacks
            "needed_images": images_needed(need(d, "target", where)),
            "min_gain_db": None,
            "stop": OLDER_STOP,
            "latency_ms": None,
        }
        values = {f.name: _field(d, f.name, where, older) for f in fields(cls)}
        steps, latency = values["steps"], values["latency_ms"]
        values["kept_fp32"] = tuple(values["kept_fp32"])
        values["steps"] = tuple(
            FallbackStep.from_json(s, f"{where}.steps[{i}]") for i, s in enumerate(steps)
        )
        if latency is not None:
            values["latency_ms"] = plain(FallbackLatency, latency, f"{where}.latency_ms")
        return cls(**values)


@dataclass(frozen=True)
class DiagnosisReport:
    """The per-layer diagnosis of a run (``qbench diagnose``, ``run --diagnose`` /
    ``--accuracy-target``): ``report.json``'s ``diagnosis`` and diagnose.json.

    Attributes:
        model: the model's name (registry name or file spec).
        calibration: the run's ``CalibrationInfo``.
        config: the ``QuantConfig`` as built, as a dict (``QuantConfig.to_dict``).
        images: calibration images the layers were measured on.
        int8_layers: INT8 layers measured.
        logits_sqnr_db: SQNR of the logits with every layer INT8 against FP32, dB.
        top1_agreement: top-1 agreement with FP32 of the all-INT8 graph, a fraction in
            [0, 1]; None for a model with a single output logit.
        layers: one dict per INT8 layer in graph order (``diagnose.analysis.as_rows``; keys:
            ``COLUMNS``' SQNRs in dB, cosine, max abs error in logit units, clipped
            fraction in [0, 1], sensitivity rank, logits SQNR gain in dB).
        ranking: the layers' names, most sensitive first.
        fallback: the FP32 fallback (``FallbackRecord``) with ``--accuracy-target``, else
            None (the JSON leaves it out).
        plots: the file names of the input histograms (PNGs beside the report).
        wall_s: the diagnosis' wall time, s (``qbench diagnose``: with the run's preparation).
    """

    model: str
    calibration: CalibrationInfo
    config: dict
    images: int
    int8_layers: int
    logits_sqnr_db: float
    top1_agreement: float | None
    layers: tuple
    ranking: tuple
    fallback: FallbackRecord | None = None
    plots: tuple = ()
    wall_s: float | None = None

    def to_json(self):
        d = {f.name: getattr(self, f.name) for f in fields(self)}
        d |= {
            "calibration": self.calibration.to_json(),
            "layers": list(self.layers),
            "ranking": list(self.ranking),
            "fallback": None if self.fallback is None else self.fallback.to_json(),
            "plots": list(self.plots),
        }
        return d if self.fallback is not None else {k: v for k, v in d.items() if k != "fallback"}

    @classmethod
    def from_json(cls, d, where="diagnosis"):
        """Read the dict back (``fallback`` may be absent: none was asked for).

        Raises:
            UserError: another field is missing; the message names it (e.g.
                ``diagnosis.fallback.steps[0].logits_sqnr_db``).
        """
        fallback = d.get("fallback") if isinstance(d, dict) else None
        return cls(
            model=need(d, "model", where),
            calibration=CalibrationInfo.from_json(
                need(d, "calibration", where), f"{where}.calibration"
            ),
            config=need(d, "config", where),
            images=need(d, "images", where),
            int8_layers=need(d, "int8_layers", where),
            logits_sqnr_db=need(d, "logits_sqnr_db", where),
            top1_agreement=need(d, "top1_agreement", where),
            layers=tuple(need(d, "layers", where)),
            ranking=tuple(need(d, "ranking", where)),
            fallback=None
            if fallback is None
            else FallbackRecord.from_json(fallback, f"{where}.fallback"),
            plots=tuple(need(d, "plots", where)),
            wall_s=need(d, "wall_s", where),
        )


COLUMNS = [
    ("layer", "layer"),
    ("accumulated_sqnr_db", "SQNR dB (INT8 graph)"),
    ("accumulated_cosine", "cosine"),
    ("accumulated_max_abs_error", "max abs err"),
    ("alone_sqnr_db", "SQNR dB alone"),
    ("weights_only_sqnr_db", "W8A32 dB"),
    ("activations_only_sqnr_db", "W32A8 dB"),
    ("clipped_fraction", "clipped"),
    ("sensitivity_rank", "sensitivity rank"),
    ("logits_sqnr_gain_db", "logits dB regained in FP32"),
]
TOP = 5
LEGEND = (
    "SQNR dB (INT8 graph): the layer's output with every layer quantized, against FP32. "
    "alone: only this layer quantized, on its FP32 input; W8A32: its weight only; W32A8: "
    "its input only. clipped: its FP32 input values outside the calibrated range. "
    "sensitivity rank: 1 = the logits regain most SQNR when this layer alone stays FP32. "
    "Measured on the calibration images with the INT8 graph's scales, zero points and "
    "rounding (PyTorch fake quantization)."
)


def skip_file_text(report):
    """The fallback's layers of a ``DiagnosisReport``, one name per line, with a comment
    header (``--skip-layers @FILE`` format: blank lines and text after ``#`` are ignored)."""
    fb = report.fallback
    head = (
        f"# qbench diagnose: layers kept in FP32 for top-1 agreement >= {fb.target} "
        f"({report.model}; reached: {'yes' if fb.reached else 'no'})\n"
    )
    return head + "".join(f"{name}\n" for name in fb.kept_fp32)


def _cell(key, value):
    if key == "clipped_fraction":
        return f"{100 * value:.3f} %"
    if isinstance(value, float):
        return f"{value:.4f}" if key == "accumulated_cosine" else f"{value:.2f}"
    return value


def layer_table(rows, fmt="github"):
    """Every layer's row, in graph order."""
    keys = [k for k, _ in COLUMNS if k in rows[0]] if rows else []
    heads = [h for k, h in COLUMNS if k in keys]
    cells = [[_cell(k, r[k]) for k in keys] for r in rows]
    return tabulate(cells, heads, tablefmt=fmt, disable_numparse=True)


def sensitive_table(report, fmt="github"):
    """The ``TOP`` most sensitive layers of a ``DiagnosisReport``."""
    by_name = {r["layer"]: r for r in report.layers}
    return layer_table([by_name[n] for n in report.ranking[:TOP]], fmt)


def summary(report):
    """Plain-text lines of a ``DiagnosisReport``: what was measured, and the fallback's
    outcome."""
    lines = [
        f"{report.model}: {report.int8_layers} INT8 layers, {report.images} "
        f"calibration images ({report.calibration.mode}); all INT8: "
        f"{_agreement(report.top1_agreement)}logits SQNR {report.logits_sqnr_db:.2f} dB; "
        f"{report.wall_s:.0f} s",
    ]
    fb = report.fallback
    if fb is not None:
        last = fb.last_accepted
        if fb.reached:
            state = "reached" if fb.stop == "target reached" else f"reached: {fb.stop}"
        else:
            state = f"NOT reached ({fb.stop})"
        lines.append(
            f"FP32 fallback for top-1 agreement >= {fb.target} on {fb.held_out_images} "
            f"held-out images: {state} with "
            f"{plural(len(fb.kept_fp32), 'layer')} in FP32 "
            f"({', '.join(fb.kept_fp32) or 'none'}): "
            f"{100 * last.top1_agreement:.2f} %, logits SQNR {last.logits_sqnr_db:.2f} dB"
        )
        needed = fb.needed_images
        if needed is None or fb.held_out_images < needed:
            need = f"at least {needed} needed" if needed else "no number of images can"
            lines.append(
                f"{fb.held_out_images} held-out images cannot show {fb.target}: {need} "
                "(95 % Clopper-Pearson)"
                + (
                    f"; the search keeps a layer only for a logits SQNR gain >= "
                    f"{fb.min_gain_db:g} dB"
                    if fb.min_gain_db is not None
                    else ""
                )
            )
        lines.append(_latency_cost_line(fb.latency_ms))
    return lines


PATH_HEADS = [
    "step",
    "layer kept in FP32",
    "held-out top-1 agreement",
    "logits SQNR (dB)",
    "gain (dB)",
    "TVM INT8 latency (ms)",
    "kept",
]


def path_table(record, fmt="github"):
    """The path of the ``FallbackRecord`` ``record``, one row per step: the layer added, held-out
    agreement with counts and interval, SQNR, its gain, latency."""
    rows, before = [], None
    for i, s in enumerate(record.steps):
        low, high = s.top1_agreement_ci95
        agree = (
            f"{100 * s.top1_agreement:.1f} % ({s.top1_agreement_count}/"
            f"{s.top1_agreement_total}; CI {100 * low:.1f}-{100 * high:.1f})"
        )
        gain = "-" if before is None else f"{s.logits_sqnr_db - before:+.2f}"
        ms = s.latency_ms
        rows.append(
            [i, s.layer or "(all INT8)", agree, f"{s.logits_sqnr_db:.2f}", gain]
            + ["-" if ms is None else f"{ms:.2f}", "yes" if s.accepted else "no: gain too small"]
        )
        before = s.logits_sqnr_db if s.accepted else before
    return tabulate(rows, PATH_HEADS, tablefmt=fmt, disable_numparse=True)


def _agreement(fraction):
    """``top-1 agreement 99.00 %, `` or nothing for a single-logit model (None)."""
    return "" if fraction is None else f"top-1 agreement {100 * fraction:.2f} %, "


def _latency_cost_line(ms):
    """The fallback's latency cost (a ``FallbackLatency``) in words; ``ms`` None: no layer
    was kept in FP32, so nothing was timed (two identical builds would only show timing
    noise as a cost)."""
    if ms is None:
        return "TVM INT8 latency: unchanged (no layer kept in FP32, the INT8 graph is the same)"
    cost = 100 * (ms.with_fallback / ms.all_int8 - 1)
    return (
        f"TVM INT8 latency per batch: {ms.all_int8:.2f} ms all INT8, "
        f"{ms.with_fallback:.2f} ms with the fallback ({cost:+.1f} %)"
    )


def render_markdown(report):
    """diagnose.md of a ``DiagnosisReport``."""
    parts = [f"# qbench diagnose: {report.model}", "", *summary(report), ""]
    if report.fallback is not None:
        parts += ["## FP32 fallback path", "", path_table(report.fallback), ""]
    parts += [f"## The {TOP} most sensitive layers", "", sensitive_table(report), ""]
    parts += [f"![input histogram]({png})" for png in report.plots] + [""]
    parts += ["## Every INT8 layer", "", layer_table(report.layers), "", LEGEND, ""]
    return "\n".join(parts)


def write_diagnosis(report, root, pngs=None):
    """Write diagnose.json (``report.to_json()``, a ``DiagnosisReport``), diagnose.md, the
    ``pngs`` ({file name: PNG bytes}) and, after a fallback, skip_layers.txt into a new
    timestamped folder under ``root``; return it."""
    stamp = dt.datetime.now().strftime("%Y%m%d-%H%M%S")
    name = re.sub(r"[^A-Za-z0-9_.-]+", "_", Path(report.model).name)
    files = {"diagnose.json": to_json(report.to_json()), "diagnose.md": render_markdown(report)}
    files.update(pngs or {})
    if report.fallback is not None:
        files["skip_layers.txt"] = skip_file_text(report)
    return write_folder(Path(root) / f"{stamp}-{name}-diagnose", files)


def diagnosis_title(diagnosis):
    """``Diagnosis``, plus ``and FP32 fallback`` when it chose one."""
    return "Diagnosis" + (" and FP32 fallback" if diagnosis.fallback is not None else "")
