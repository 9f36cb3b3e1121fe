"""The report's sentences: the summary lines a person reads first (verdict, speed, policy,
tuning, kernels) and the environment line."""

import json

from ..compile.dbfiles import unchecked_words
from ..core.words import plural
from ..measure.metrics import (
    ALL_VALUES,
    AS_IS,
    LOG_ODDS,
    LOG_PROBABILITIES,
    LOGITS,
    OVER_IMAGES,
    PERCENTAGES,
    PROBABILITIES,
    SIGMOIDS,
    SINGLE,
    output_of,
)
from ..measure.timing import describe
from ..signoff.checks import fastest_torch_int8
from .tables import RUNNER_TITLES, unshown_why

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


def summary_lines(report):
    m, d, env, cal = report.model, report.data, report.environment, report.calibration
    cache = "hit" if cal.cache_hit else "miss"
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
        f"({cal.mode}, cache {cache}, weight rounding "
        f"{cal.weight_rounding or 'nearest'}, bias correction "
        f"{cal.bias_correction or 'off'})"
        f"   evaluation: {d.eval_size} images",
        f"precision: {report.precision['integer_ops']}; between layers "
        f"{report.precision['between_layers']}",
        added_ops_words(report.graph["int8_added_ops"]),
    ]
    t = report.tuning
    lines.append(
        f"tuning: databases applied: {t.source} ({t.records} records in "
        f"{t.database}{_left_out(t)}, {t.pretuned_records} pre-tuned records shipped for "
        "this target; "
        f"{t.tuned_kernels} kernels took a record, the others use qbench's kernels and "
        "default schedules)"
        if t.source != "none"
        else "tuning: none (no records for this target: untuned kernels use qbench's default "
        f"schedules; see `qbench tune`){_left_out(t)}"
    )
    if t.kernels:
        lines.append(
            "kernels by schedule (qbench's hand-scheduled / tuning record / default): "
            + ", ".join(
                f"{name} {c['hand']}/{c['tuned']}/{c['default']}"
                for name, c in t.kernels.items()
                if c
            )
        )
    lines += speed_lines(report.speed) if report.speed else []
    if report.policy:
        lines.append(policy_line(report.policy))
    int8 = sum(la["dtype"] != "float32" for la in report.layers)
    lines.append(f"layers built in INT8: {int8} of {len(report.layers)}")
    lines.append(int8_kernels_line(report.int8_kernels))
    lines.append(output_line(report.results))
    failed = [c.name for c in report.signoff.failed]
    lines.append(
        f"sign-off: {report.signoff.verdict}"
        + (f" (failed: {'; '.join(failed)})" if failed else "")
        + (f", NOT SHOWN: {unshown_words(report.signoff)}" if report.signoff.unshown else "")
    )
    choice = int8_choice_line(report)
    return lines + ([choice] if choice else [])


def _left_out(tuning):
    """``, N of them left out as damaged (first: ...)`` and ``; the records of N kernels
    left out as never checked (...)`` for a ``TuningInfo`` whose builds left records of the
    database out, else ``""``."""
    words = ""
    if tuning.left_out:
        words += f", {tuning.left_out} of them left out as damaged (first: {tuning.damage})"
    elif tuning.damage:
        words += f", damaged: {tuning.damage}"
    if tuning.unchecked:
        words += f"; {unchecked_words(tuning.unchecked)}"
    return words


def int8_choice_line(report):
    """Which INT8 is faster, TVM's or the fastest PyTorch INT8 runner's (``--torch-int8``),
    with the ratio's 95 % interval and their top-1 agreements, e.g. ``PyTorch INT8 (FX x86)
    is 2.37x faster than TVM INT8 at the same top-1 agreement (...)``; None without one."""
    fastest = fastest_torch_int8(report.speed) if report.speed is not None else None
    if fastest is None:
        return None
    name, r = fastest
    title = RUNNER_TITLES[name]
    ours, theirs = (report.results[n].metrics.get("top1_agreement") for n in ("tvm_int8", name))
    if r.ci_low > 1:
        words = f"{title} is {r.ratio:.2f}x faster than TVM INT8"
        interval = f"{r.ci_low:.2f}-{r.ci_high:.2f}x"
    elif r.ci_high < 1:
        words = f"TVM INT8 is {1 / r.ratio:.2f}x faster than {title}"
        interval = f"{1 / r.ci_high:.2f}-{1 / r.ci_low:.2f}x"
    else:
        words = f"TVM INT8 and {title} are as fast within the interval"
        interval = f"TVM INT8 / it {r.ci_low:.2f}-{r.ci_high:.2f}"
    return f"INT8 to ship: {words}{_agreements(ours, theirs)} ({interval}, 95 % CI)"


def _agreements(ours, theirs):
    """`` at the same top-1 agreement`` or the two agreements (TVM INT8's, PyTorch's)."""
    if ours is None or theirs is None:
        return ""
    if round(ours, 6) == round(theirs, 6):
        return f" at the same top-1 agreement ({100 * ours:.1f} %)"
    return f" at top-1 agreement {100 * ours:.1f} % (TVM INT8) and {100 * theirs:.1f} % (PyTorch)"


OUTPUT_WORDS = {  # metrics.output_kind: what it means
    LOGITS: "logits",
    PROBABILITIES: "probabilities (non-negative rows that sum to 1)",
    PERCENTAGES: "percentages (non-negative rows that sum to 100)",
    LOG_PROBABILITIES: "log-probabilities (rows whose logsumexp is 0)",
    SIGMOIDS: "independent probabilities (the model ends in a sigmoid per class)",
    SINGLE: "a single value per image",
}
JUDGED_VALUES = {  # metrics.output_kind: what the judged space is made of
    PROBABILITIES: "the log of each probability less its row's mean",
    PERCENTAGES: "the log of each percentage less its row's mean",
    SIGMOIDS: "log(p / (1 - p)) of each value p, clipped at +-16.6, float32's resolution near 1",
}


def output_line(results):
    """What the model returns and the space the INT8 and FP32 builds' error was judged in
    (``metrics.output_of``), e.g. ``output: log-probabilities (rows whose logsumexp is 0);
    max abs diff, cosine, SQNR and flip margins judged on centred logits (...)``, and what
    the cosine is taken over where it is not rows (``metrics.cosine_over``)."""
    kind, space = output_of(results)
    over = results["tvm_int8"].metrics.get("cosine_over") if "tvm_int8" in results else None
    remark = (
        "; cosine over all values (a row has one degree of freedom: its own cosine is +-1)"
        if over == ALL_VALUES
        else ""
    )
    return f"output: {OUTPUT_WORDS.get(kind, kind)}; {_judged_words(kind, space)}{remark}"


def _judged_words(kind, space):
    if space == LOG_ODDS:
        value = f"{JUDGED_VALUES[kind]}: the logit each sigmoid was given"
        return f"max abs diff, cosine, SQNR and flip margins judged on {space} ({value})"
    if space == OVER_IMAGES:
        return (
            f"max abs diff, cosine and SQNR judged on {space} (an offset shared by every "
            "image does not count; no softmax)"
        )
    if space != AS_IS:
        value = JUDGED_VALUES.get(kind, "each value less its row's mean")
        return (
            f"max abs diff, cosine, SQNR and flip margins judged on {space} ({value}: no "
            "per-row constant counts)"
        )
    if kind == SINGLE:
        return (
            "max abs diff, cosine and SQNR judged on it as is (a report from before single "
            "values were centred)"
        )
    return (
        "max abs diff, cosine, SQNR and flip margins judged as is (a report from before "
        "output kinds were told apart)"
    )


def unshown_words(signoff):
    """What the images of a run cannot show, e.g. ``14 images cannot show INT8 top-1
    agreement >= 97.0 % (at least 122 needed, 95 % Clopper-Pearson)``."""
    counted = [c for c in signoff.unshown if c.doubt is None]
    parts = [f"{c.name} {c.op} {100 * c.limit:.1f} % ({unshown_why(c)})" for c in counted]
    words = [f"{c.name}: {c.doubt}" for c in signoff.unshown if c.doubt is not None]
    if counted:
        sample = plural(counted[0].sample, "image")
        words.insert(0, f"{sample} cannot show {'; '.join(parts)}, 95 % Clopper-Pearson")
    return "; ".join(words)


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


def int8_kernels_line(info):
    """The CPU class and the kernel path of every INT8 layer (``info``: a
    ``compile.info.Int8Kernels``), e.g. ``CPU class AVX2; INT8 kernels: conv2d avx2 33, conv2d
    depthwise 16, matmul avx2 1``."""
    paths = ", ".join(f"{path} {n}" for path, n in info.paths.items()) or "none"
    return f"CPU class {info.cpu_class}; INT8 layers by kernel: {paths}"


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
