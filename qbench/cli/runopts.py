"""From parsed arguments to ``pipeline.RunOptions``, which checks every value where it is
made: a bad one is refused (``UserError``, exit 2) before anything slow runs."""

from pathlib import Path

from ..core.errors import UserError
from .options import HOLDOUT_SIZE


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


def run_options(args):
    """The ``pipeline.RunOptions`` of a run-like command's parsed ``args``, checked where it
    is made (``RunOptions``, ``QuantConfig``, ``Limits``), as the Python API's are.

    Raises:
        UserError: a bad value (names the flag, the value and the valid range), a bad
            ``--policy`` file or ``--target``.
    """
    from ..pipeline.options import RunOptions
    from ..quantize import QuantConfig

    quant = QuantConfig(
        calib_mode=args.calib_mode,
        **_mode_params(args),
        per_channel=not args.per_tensor,
        skip_layers=skip_list(args.skip_layers),
        skip_first=args.keep_first_fp32,
        simulate=args.simulate,
        weight_rounding=args.weight_rounding,
        bias_correction=args.bias_correction,
        reduce_range=args.reduce_range,
        fit_pairs=args.fit_pairs,
    )
    fields = (
        "model target data weights input_shape mean std calib_size eval_size batch_size seed "
        "threads cache_dir reports_dir rpc rpc_tracker rpc_key tuning_db"
    ).split()
    target = getattr(args, "accuracy_target", None)
    limits, policy = _limits(args)
    return RunOptions(
        quant=quant,
        limits=limits,
        policy=policy,
        tune=_tunes(args),
        **({"holdout_size": HOLDOUT_SIZE if target is not None else 0} | _dependent(args)),
        accuracy_target=target,
        diagnose=getattr(args, "diagnose", False),
        torch_int8=getattr(args, "torch_int8", ""),
        **{f: getattr(args, f) for f in fields},
    )


DEPENDENT = {  # argparse dest: (its flag, the flag whose work reads it, RunOptions field,
    # the commands where only that work reads it, or None: all)
    "trials": ("--trials", "--tune", "trials", None),
    "time_budget": ("--time-budget", "--tune", "time_budget_min", None),
    "tune_graphs": ("--tune-graphs", "--tune", "tune_graphs", None),
    "holdout_size": ("--holdout-size", "--accuracy-target", "holdout_size", None),
    "warmup": ("--warmup", "--accuracy-target", "warmup", ("diagnose",)),  # the fallback's
    "repeat": ("--repeat", "--accuracy-target", "repeat", ("diagnose",)),  # latency cost
}


def _tunes(args):
    """Whether the command tunes: ``qbench tune`` always, ``qbench run`` with ``--tune``."""
    return getattr(args, "command", None) == "tune" or getattr(args, "tune", False)


def _dependent(args):
    """{RunOptions field: value} of the ``DEPENDENT`` flags given.

    Raises:
        UserError: one given without the flag whose work reads it (``qbench tune`` always
            tunes; ``qbench sweep`` never does; ``qbench diagnose`` times only the
            ``--accuracy-target`` fallback): the run would go on without it, and its report
            would not say so.
    """
    works = {
        "--tune": _tunes(args),
        "--accuracy-target": getattr(args, "accuracy_target", None) is not None,
    }
    given = {}
    for dest, (flag, needs, field, commands) in DEPENDENT.items():
        value = getattr(args, dest, None)
        if value is None:
            continue
        if (commands is None or getattr(args, "command", None) in commands) and not works[needs]:
            raise UserError(
                f"{flag} {value}: only read with {needs}, which this run does not have; drop "
                f"{flag} or add {needs}"
            )
        given[field] = value
    return given


def _mode_params(args):
    """``--percentile`` and ``--global-scale`` where given, for the one mode that takes each.

    Raises:
        UserError: one given with another ``--calib-mode``: that run would calibrate without
            it, and its report would not say so.
    """
    given = {"percentile": args.percentile, "global_scale": args.global_scale}
    given = {mode: value for mode, value in given.items() if value is not None}
    for mode, value in given.items():
        if args.calib_mode != mode:
            flag = "--" + mode.replace("_", "-")
            raise UserError(
                f"{flag} {value}: only --calib-mode {mode} takes it, and this run calibrates "
                f"with --calib-mode {args.calib_mode}; drop {flag} or use --calib-mode {mode}"
            )
    return given


def _limits(args):
    """The sign-off limits of a run: a flag given > ``--policy`` > the limit's default.

    Returns:
        (``signoff.limits.Limits``, the report's policy record or None).
    Raises:
        UserError: a bad limit, policy file or ``--target``.
    """
    from ..compile import targets
    from ..model.zoo import model_id
    from ..signoff import policy
    from ..signoff.limits import SPECS

    given = {name: getattr(args, name) for name in SPECS}
    given = {name: value for name, value in given.items() if value is not None}
    path = getattr(args, "policy", None)
    if path is None:
        return policy.applied(None, model_id(args.model), None, given)
    loaded = policy.load(path)
    kind = targets.parse_target(args.target, args.threads, runs_here=False)["kind"]
    return policy.applied(loaded, model_id(args.model), kind, given)
