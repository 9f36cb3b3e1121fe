"""``qbench run --policy FILE``: sign-off limits per model and target kind, from TOML.

A team commits the file beside its model sets. Layout (any ``limits.Limits`` field, by
name, in any table)::

    [defaults]                                  # every model and target
    min_top1_agreement = 0.985
    [models.efficientnet_lite0]                 # this --model, overrides [defaults]
    max_accuracy_drop = 0.5
    [models.efficientnet_lite0.targets.llvm]    # this --model on this target kind
    min_int8_speedup = 1.1
    max_int8_latency_ms = 80

Precedence: a flag given on the command line > the most specific table > ``[defaults]`` >
the limit's default (``limits.Limits``). A model the file does not name gets ``[defaults]``.
"""

import hashlib
import tomllib
from pathlib import Path

from ..core.errors import UserError
from .limits import DEFAULTS, SPECS, Limits

LIMIT_NAMES = tuple(SPECS)
TOP_KEYS = ("defaults", "models")


def load(path):
    """Read and check a policy file.

    Args:
        path: the TOML file.
    Returns:
        dict: ``path``, ``sha256`` (hex digest of the file's bytes), ``defaults`` {limit:
        value}, ``models`` {model: {"limits": {limit: value}, "targets": {kind: {limit:
        value}}}}.
    Raises:
        UserError: the file is unreadable or not TOML, or holds an unknown table or key, a
        value of the wrong type or out of range; the message names the file, the key and
        the valid keys or range.
    """
    try:
        raw = Path(path).read_bytes()
    except OSError as e:
        raise UserError(f"--policy {path}: cannot read it ({e.strerror or e})") from None
    try:
        doc = tomllib.loads(raw.decode("utf-8-sig"))  # a byte order mark (Notepad's) is allowed
    except (UnicodeDecodeError, tomllib.TOMLDecodeError) as e:
        raise UserError(f"--policy {path}: not valid TOML ({e})") from None
    _known(path, "the top level", doc, TOP_KEYS)
    models = _table(path, "models", doc.get("models", {}))
    return {
        "path": str(path),
        "sha256": hashlib.sha256(raw).hexdigest(),
        "defaults": _limits(path, "defaults", doc.get("defaults", {})),
        "models": {name: _model(path, name, entry) for name, entry in models.items()},
    }


def _model(path, name, entry):
    """One ``[models.NAME]`` table: its limits and its ``targets`` tables."""
    from ..compile.targets import KINDS

    where = f"models.{name}"
    entry = _table(path, where, entry)
    targets = _table(path, f"{where}.targets", entry.get("targets", {}))
    _known(path, f"{where}.targets", targets, tuple(KINDS))
    limits = {k: v for k, v in entry.items() if k != "targets"}
    return {
        "limits": _limits(path, where, limits, extra=("targets",)),
        "targets": {
            kind: _limits(path, f"{where}.targets.{kind}", t) for kind, t in targets.items()
        },
    }


def _limits(path, where, table, extra=()):
    """The limits of one table, checked: known names, numbers in range."""
    table = _table(path, where, table)
    _known(path, where, table, LIMIT_NAMES + extra)
    for key, value in table.items():
        if isinstance(value, bool) or not isinstance(value, (int, float)):
            raise UserError(f"--policy {path}: [{where}] {key} = {value!r}: must be a number")
        problem = SPECS[key].problem(value)
        if problem:
            raise UserError(f"--policy {path}: [{where}] {key} = {value!r}: {problem}")
    return {key: float(value) for key, value in table.items()}


def _table(path, where, value):
    if not isinstance(value, dict):
        raise UserError(f"--policy {path}: {where} must be a table ([{where}]), not {value!r}")
    return value


def _known(path, where, table, valid):
    unknown = sorted(set(table) - set(valid))
    if unknown:
        raise UserError(
            f"--policy {path}: unknown key {unknown[0]!r} in {where}; valid: {', '.join(valid)}"
        )


def resolve(policy, model, kind):
    """The limits ``policy`` sets for ``model`` on target ``kind``, most specific first.

    Args:
        policy: ``load``'s dict.
        model: the model's name, ``zoo.model_id`` of ``--model`` (a file model by its base
            name: ``[models."m.py:build"]``).
        kind: the target kind (``llvm``, ``cuda``).
    Returns:
        {limit name: (value, table it came from, e.g. ``models.resnet18.targets.llvm``)}.
    """
    entry = policy["models"].get(model, {"limits": {}, "targets": {}})
    layers = (
        ("defaults", policy["defaults"]),
        (f"models.{model}", entry["limits"]),
        (f"models.{model}.targets.{kind}", entry["targets"].get(kind, {})),
    )
    return {key: (value, where) for where, table in layers for key, value in table.items()}


def applied(policy, model, kind, given):
    """The run's limits and the report's record of the policy.

    Args:
        policy: ``load``'s dict, or None (no ``--policy``).
        model, kind: as ``resolve``.
        given: {limit name: value} of the sign-off flags given on the command line.
    Returns:
        (limits, record): the run's ``limits.Limits`` (flag > policy > the limit's
        default); record None without a policy, else ``path``,
        ``sha256``, ``model``, ``target_kind``, ``limits`` {name: {"value", "from"}} (what
        the file set for this run), ``overridden_by_flags`` (names a flag won) and
        ``unmatched`` (why no model table applied, or None).
    """
    chosen = resolve(policy, model, kind) if policy else {}
    values = DEFAULTS | {name: value for name, (value, _) in chosen.items()} | given
    limits = Limits(**values)
    if policy is None:
        return limits, None
    return limits, {
        "path": policy["path"],
        "sha256": policy["sha256"],
        "model": model,
        "target_kind": kind,
        "limits": {name: {"value": v, "from": where} for name, (v, where) in chosen.items()},
        "overridden_by_flags": sorted(set(chosen) & set(given)),
        "unmatched": _unmatched(policy, model),
    }


def _unmatched(policy, model):
    """Why no ``[models.NAME]`` table applies to ``model`` (a misspelt name would otherwise
    pass unseen), or None when one does or the file has none."""
    names = sorted(policy["models"])
    if not names or model in names:
        return None
    return f"no [models.{model!r}] table, so [defaults] apply; the file names: {', '.join(names)}"
