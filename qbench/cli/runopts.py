"""From parsed arguments to a checked ``pipeline.RunOptions``: every bad value is refused
(``UserError``, exit 2) before anything slow runs."""

import math
from pathlib import Path

from ..core.errors import UserError
from .options import MIN_REPEAT, SIGNOFF_OPTIONS


def _check_fallback_args(args):
    """Raises UserError: a bad ``--accuracy-target`` or ``--holdout-size``."""
    target = getattr(args, "accuracy_target", None)
    if target is not None and not (math.isfinite(target) and 0 <= target <= 1):
        raise UserError(f"--accuracy-target {target}: must be a finite number in [0, 1]")
    if getattr(args, "holdout_size", 1) < 1:
        raise UserError(f"--holdout-size {args.holdout_size}: must be >= 1")


def skip_list(text):
    """``--skip-layers`` text -> layer indices (ASCII digits) and names. ``@FILE`` reads
    layer names only (a name of digits, as ``nn.Sequential`` gives, stays a name), one per
    line; text after ``#`` is ignored: the ``skip_layers.txt`` that ``qbench diagnose
    --accuracy-target`` writes.

    Raises:
        UserError: FILE cannot be read.
    """
    if text.startswith("@"):
        path = Path(text[1:])
        try:
            lines = path.read_text().splitlines()
        except (OSError, UnicodeDecodeError) as e:
            raise UserError(f"--skip-layers @{path}: cannot read it ({e})") from None
        return tuple(name for line in lines if (name := line.split("#", 1)[0].strip()))
    items = [s.strip() for s in text.split(",") if s.strip()]
    return tuple(int(s) if s.isascii() and s.isdigit() else s for s in items)


def _check_args(args):
    """Reject bad option values before anything slow runs.

    Raises:
        UserError: names the flag, the value and the valid range.
    """
    from ..signoff.checks import limit_problem

    check_model_args(args)
    limits = [
        ("threads", 1, None),
        ("repeat", MIN_REPEAT, None),
        ("warmup", 0, None),
        ("seed", 0, None),
        ("calib_size", 1, None),
        ("eval_size", 1, None),
        ("percentile", 0, 100),
        ("global_scale", 0, None),
        ("trials", 1, None),
        ("time_budget", 0, None),
    ]
    for name, lo, hi in limits:
        value = getattr(args, name)
        if value is None:
            continue
        bad = not math.isfinite(value) or value < lo or (hi is not None and value > hi)
        bad = bad or (name in ("percentile", "global_scale", "time_budget") and value <= 0)
        if bad:
            valid = f"in [{lo}, {hi}]" if hi is not None else f">= {lo}"
            if name in ("percentile", "global_scale", "time_budget"):
                valid = valid.replace("[0,", "(0,").replace(">= 0", "> 0")
            raise UserError(f"--{name.replace('_', '-')} {value}: must be a finite number {valid}")
    for dest, flag, _ in SIGNOFF_OPTIONS:
        value = getattr(args, dest)
        problem = None if value is None else limit_problem(dest, value)
        if problem:
            raise UserError(f"{flag} {value}: {problem}")
    for flag, values in (("--mean", args.mean), ("--std", args.std)):
        if values and not all(math.isfinite(v) for v in values):
            raise UserError(f"{flag} {values}: every value must be a finite number")
    if args.std and min(abs(v) for v in args.std) == 0:
        raise UserError(f"--std {args.std}: every value must be non-zero")
    graphs = set(args.tune_graphs.split(","))
    if not graphs or not graphs <= {"fp32", "int8"}:
        raise UserError(f"--tune-graphs {args.tune_graphs}: valid: fp32, int8 or fp32,int8")
    if args.data == "":
        raise UserError("--data '': empty; valid: a folder, hf:NAME[:SPLIT], synthetic, embedded")


def check_model_args(args):
    """Checks of the options ``layers`` shares with ``run``.

    Raises:
        UserError: names the flag, the value and the valid range.
    """
    if args.batch_size < 1:
        raise UserError(f"--batch-size {args.batch_size}: must be a finite number >= 1")
    if args.input_shape and min(args.input_shape) < 1:
        raise UserError(f"--input-shape {args.input_shape}: C, H and W must be >= 1")


def run_options(args):
    """The checked ``pipeline.RunOptions`` of a run-like command's parsed ``args``.

    Raises:
        UserError: a bad value (names the flag, the value and the valid range).
    """
    from ..pipeline.options import RunOptions
    from ..quantize import QuantConfig

    _check_args(args)
    quant = QuantConfig(
        calib_mode=args.calib_mode,
        percentile=args.percentile,
        global_scale=args.global_scale,
        per_channel=not args.per_tensor,
        skip_layers=skip_list(args.skip_layers),
        skip_first=args.keep_first_fp32,
        simulate=args.simulate,
        weight_rounding=args.weight_rounding,
        bias_correction=args.bias_correction,
        reduce_range=args.reduce_range,
    )
    from ..compile.tuning import default_root

    fields = (
        "model target data weights input_shape mean std calib_size eval_size batch_size seed "
        "threads warmup repeat cache_dir reports_dir rpc rpc_tracker rpc_key"
    ).split()
    args.tuning_db = args.tuning_db or str(default_root())
    fields.append("tuning_db")
    tune = {"tune_trials": args.trials if getattr(args, "tune", False) else 0}
    tune["time_budget_min"] = args.time_budget
    tune["tune_graphs"] = tuple(g for g in ("fp32", "int8") if g in args.tune_graphs.split(","))
    _check_fallback_args(args)
    target = getattr(args, "accuracy_target", None)
    tune["holdout_size"] = args.holdout_size if target is not None else 0
    tune["accuracy_target"] = target
    tune["diagnose"] = getattr(args, "diagnose", False)
    limits, policy = _limits(args)
    return RunOptions(
        quant=quant, policy=policy, **tune, **limits, **{f: getattr(args, f) for f in fields}
    )


def _limits(args):
    """The sign-off limits of a run: a flag given > ``--policy`` > ``signoff.Limits``.

    Returns:
        ({``signoff.Limits`` field: value}, the report's policy record or None).
    Raises:
        UserError: a bad policy file (``policy.load``) or ``--target``.
    """
    from ..compile import targets
    from ..model.zoo import model_id
    from ..signoff import policy

    given = {dest: getattr(args, dest) for dest, _, _ in SIGNOFF_OPTIONS}
    given = {dest: value for dest, value in given.items() if value is not None}
    path = getattr(args, "policy", None)
    if path is None:
        return policy.applied(None, model_id(args.model), None, given)
    loaded = policy.load(path)
    kind = targets.parse_target(args.target, args.threads, runs_here=False)["kind"]
    return policy.applied(loaded, model_id(args.model), kind, given)
