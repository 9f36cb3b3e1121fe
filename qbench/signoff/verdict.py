"""The sign-off's result as frozen dataclasses: each ``Check`` and the ``Verdict``, the
``signoff`` section of ``report.json`` (``Verdict.to_json``)."""

from dataclasses import dataclass, fields

from ..measure.results import need


@dataclass(frozen=True)
class Check:
    """One sign-off check (``checks.signoff``).

    Attributes:
        name: what is checked, e.g. ``INT8 top-1 agreement``.
        value: the measured value in ``unit``, rounded to 6 decimals, or None when the check
            does not apply or could not be computed (``detail`` says why).
        op: ``">="`` or ``"<="``: how ``value`` must compare with ``limit``.
        limit: the threshold, in ``unit``.
        passed: True, False, or None (not applicable).
        unit: ``"fraction"`` (in [0, 1]), ``"points"`` (percentage points), ``"dB"``,
            ``"cosine"`` (in [-1, 1]), ``"count"``, ``"speed-up"`` (a factor), ``"ms"``, or
            ``"flag"`` (1 yes, 0 no).
        ci_low, ci_high, confidence: the confidence interval of a speed-up check (bootstrap)
            or of an agreement check (Clopper-Pearson, ``intervals``), else None.
        detail: why a check has no value, or a note on its verdict, else None.
        sample: the images an agreement check counted, else None.
        needed: the fewest images that could show an agreement check's limit
            (``intervals.images_needed``; None with ``sample`` set: no number can), else None.
        doubt: why a passing value shows nothing (e.g. an accuracy drop measured while FP32
            accuracy is near chance: wrong labels or weights), else None.
    """

    name: str
    value: float | None
    op: str
    limit: float
    passed: bool | None
    unit: str
    ci_low: float | None = None
    ci_high: float | None = None
    confidence: float | None = None
    detail: str | None = None
    sample: int | None = None
    needed: int | None = None
    doubt: str | None = None

    @property
    def unshown(self):
        """Whether the check passed on its value although it shows nothing: a ``doubt``, or
        the lower end of its 95 % interval lies below the limit (images too few, ``needed``
        more than ``sample``, or misses too many for the images given)."""
        if not self.passed:
            return False
        if self.doubt is not None:
            return True
        if self.sample is None:
            return False
        return self.ci_low is None or self.ci_low < self.limit

    def to_json(self):
        """The check's dict; the optional fields only when set."""
        optional = ("ci_low", "ci_high", "confidence", "detail", "sample", "needed", "doubt")
        d = {f.name: getattr(self, f.name) for f in fields(self)}
        return {k: v for k, v in d.items() if k not in optional or v is not None}

    @classmethod
    def from_json(cls, d, where):
        required = {f.name: need(d, f.name, where) for f in fields(cls)[:6]}
        optional = {f.name: d.get(f.name) for f in fields(cls)[6:]}
        return cls(**required, **optional)


@dataclass(frozen=True)
class Verdict:
    """The sign-off: ``verdict`` ``"PASS"`` (no check failed) or ``"FAIL"``, and ``checks``
    (a tuple of ``Check``)."""

    verdict: str
    checks: tuple

    @property
    def failed(self):
        """The checks that failed (``passed`` False), in order."""
        return [c for c in self.checks if c.passed is False]

    @property
    def unshown(self):
        """The checks that passed but whose images are too few to show their limit."""
        return [c for c in self.checks if c.unshown]

    def to_json(self):
        checks = [c.to_json() for c in self.checks]
        return {"verdict": self.verdict, "shown": not self.unshown, "checks": checks}

    @classmethod
    def from_json(cls, d, where="signoff"):
        checks = need(d, "checks", where)
        return cls(
            verdict=need(d, "verdict", where),
            checks=tuple(Check.from_json(c, f"{where}.checks[{i}]") for i, c in enumerate(checks)),
        )
