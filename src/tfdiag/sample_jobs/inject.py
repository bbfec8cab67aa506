"""``--inject SPEC`` and ``--tune KEY=VALUE``: parsed into small frozen dataclasses.

Injections plant a known bottleneck or fault in a sample job; tunings apply a change
the advisor can recommend. Both are parsed here once, with errors that name the option
and the value received, and travel to every task of the job as their spec strings.

Example:
    >>> parse_injection("slow-worker=1:40")
    SlowWorker(worker=1, ms=40.0, from_step=0)
    >>> parse_injection("slow-worker=1:40@2000").spec
    'slow-worker=1:40@2000'
    >>> parse_tuning("prefetch=on")
    Tuning(key='prefetch', value='on')
"""

from __future__ import annotations

import re
from dataclasses import dataclass
from decimal import Decimal

from tfdiag.errors import InvalidOptionError


@dataclass(frozen=True)
class InputDelay:
    """``input-delay=MS``: each input element costs MS more to produce."""

    ms: float
    kind = "input-delay"

    @property
    def spec(self) -> str:
        return f"{self.kind}={_num(self.ms)}"


@dataclass(frozen=True)
class SlowInput:
    """``slow-input=I:MS``: worker I's input elements cost MS more to produce (the others' do not)."""

    worker: int
    ms: float
    kind = "slow-input"

    @property
    def spec(self) -> str:
        return f"{self.kind}={self.worker}:{_num(self.ms)}"


@dataclass(frozen=True)
class SlowWorker:
    """``slow-worker=I:MS[@STEP]``: worker I spends MS more per step (from STEP on)."""

    worker: int
    ms: float
    from_step: int = 0
    kind = "slow-worker"

    @property
    def spec(self) -> str:
        return f"{self.kind}={self.worker}:{_num(self.ms)}" + (f"@{self.from_step}" if self.from_step else "")


@dataclass(frozen=True)
class ShardSkew:
    """``shard-skew=I:F``: worker I gets F times the data of the others."""

    worker: int
    factor: float
    kind = "shard-skew"

    @property
    def spec(self) -> str:
        return f"{self.kind}={self.worker}:{_num(self.factor)}"


@dataclass(frozen=True)
class HotPs:
    """``hot-ps=I``: a large unpartitioned variable lands on ps I."""

    ps: int
    kind = "hot-ps"

    @property
    def spec(self) -> str:
        return f"{self.kind}={self.ps}"


@dataclass(frozen=True)
class SlowPs:
    """``slow-ps=I:MS``: MS of added round-trip latency on the network path to ps I."""

    ps: int
    ms: float
    kind = "slow-ps"

    @property
    def spec(self) -> str:
        return f"{self.kind}={self.ps}:{_num(self.ms)}"


@dataclass(frozen=True)
class KillWorker:
    """``kill-worker=I@STEP[+restart]``: worker I is killed at STEP (and maybe restarted)."""

    worker: int
    step: int
    restart: bool = False
    kind = "kill-worker"

    @property
    def spec(self) -> str:
        return f"{self.kind}={self.worker}@{self.step}" + ("+restart" if self.restart else "")


Injection = InputDelay | SlowInput | SlowWorker | ShardSkew | HotPs | SlowPs | KillWorker

# ASCII digits only: ``\d`` would take any Unicode digit, which ``int``/``float`` then
# read differently (or reject, as the superscript "²").
_INT = r"([0-9]+)"
_NUM = r"([0-9]+(?:\.[0-9]*)?|\.[0-9]+)"
# The largest delay (ms) and shard-skew factor accepted: far beyond any useful demo, and
# small enough that the microseconds and batch sizes derived from them fit an int64.
MAX_MS = 3_600_000.0
MAX_FACTOR = 1000.0
_FORMS = {
    "input-delay": (re.compile(rf"{_NUM}"), "MS", lambda m: InputDelay(float(m[1]))),
    "slow-input": (re.compile(rf"{_INT}:{_NUM}"), "I:MS", lambda m: SlowInput(int(m[1]), float(m[2]))),
    "slow-worker": (
        re.compile(rf"{_INT}:{_NUM}(?:@{_INT})?"),
        "I:MS[@STEP]",
        lambda m: SlowWorker(int(m[1]), float(m[2]), int(m[3] or 0)),
    ),
    "shard-skew": (re.compile(rf"{_INT}:{_NUM}"), "I:F", lambda m: ShardSkew(int(m[1]), float(m[2]))),
    "hot-ps": (re.compile(_INT), "I", lambda m: HotPs(int(m[1]))),
    "slow-ps": (re.compile(rf"{_INT}:{_NUM}"), "I:MS", lambda m: SlowPs(int(m[1]), float(m[2]))),
    "kill-worker": (
        re.compile(rf"{_INT}@{_INT}(\+restart)?"),
        "I@STEP[+restart]",
        lambda m: KillWorker(int(m[1]), int(m[2]), bool(m[3])),
    ),
}

INJECTION_KINDS = tuple(_FORMS)


def _num(value: float) -> str:
    """``value`` in the positional notation the parser reads back (never ``1e+06``)."""
    text = format(Decimal(repr(value)), "f")
    return text.rstrip("0").rstrip(".") if "." in text else text


def parse_injection(spec: str) -> Injection:
    """Parses one ``--inject`` value.

    Raises:
        InvalidOptionError: naming ``--inject`` and the value received.
    """
    text = (spec or "").strip()
    kind, sep, value = text.partition("=")
    kind = kind.strip().lower()
    if not sep or kind not in _FORMS:
        raise InvalidOptionError(
            f"Invalid value for option `--inject`. Expected KIND=VALUE with KIND one of "
            f"{', '.join(INJECTION_KINDS)}. Received: {spec!r}"
        )
    pattern, form, build = _FORMS[kind]
    match = pattern.fullmatch(value.strip().lower())
    if match is None:
        raise InvalidOptionError(f"Invalid value for option `--inject`. Expected {kind}={form}. Received: {spec!r}")
    injection = build(match)
    if kind == "shard-skew" and not 0 < injection.factor <= MAX_FACTOR:
        raise InvalidOptionError(
            f"Invalid value for option `--inject`. The factor F must be > 0 and <= {MAX_FACTOR:g}. Received: {spec!r}"
        )
    if getattr(injection, "ms", 0) > MAX_MS:
        raise InvalidOptionError(
            f"Invalid value for option `--inject`. MS must be <= {MAX_MS:.0f}. Received: {spec!r}"
        )
    return injection


@dataclass(frozen=True)
class Tuning:
    """One ``--tune KEY=VALUE``."""

    key: str
    value: str

    @property
    def spec(self) -> str:
        return f"{self.key}={self.value}"


_ON_OFF = ("on", "off")
# The values each tuning accepts: a tuple of words, or a type the value must parse as.
TUNING_VALUES: dict[str, tuple[str, ...] | type] = {
    "prefetch": _ON_OFF,
    "map_parallel": _ON_OFF,
    "mixed_precision": _ON_OFF,
    "partitioner": int,
    "batch": int,
    "steps_per_closure": int,
    "autoshard": ("data", "file", "off", "auto"),
    "strategy": ("ps", "mwms"),
}


def parse_tuning(spec: str) -> Tuning:
    """Parses one ``--tune`` value.

    Raises:
        InvalidOptionError: naming ``--tune`` and the value received.
    """
    key, sep, value = (spec or "").partition("=")
    key, value = key.strip().lower(), value.strip().lower()
    if not sep or key not in TUNING_VALUES:
        raise InvalidOptionError(
            f"Invalid value for option `--tune`. Expected KEY=VALUE with KEY one of "
            f"{', '.join(TUNING_VALUES)}. Received: {spec!r}"
        )
    allowed = TUNING_VALUES[key]
    if allowed is int:
        if not re.fullmatch(_INT, value) or int(value) <= 0:
            raise InvalidOptionError(f"Invalid value for option `--tune`. {key} needs a positive integer. Received: {spec!r}")
        value = str(int(value))
    elif value not in allowed:
        raise InvalidOptionError(
            f"Invalid value for option `--tune`. {key} accepts {'|'.join(allowed)}. Received: {spec!r}"
        )
    return Tuning(key, value)


@dataclass(frozen=True)
class Plan:
    """All injections and tunings of one run, with lookups the jobs use."""

    injections: tuple[Injection, ...] = ()
    tunings: tuple[Tuning, ...] = ()

    @classmethod
    def parse(cls, inject=(), tune=()) -> "Plan":
        """Parses spec strings (or passes already parsed objects through)."""
        injections = tuple(i if not isinstance(i, str) else parse_injection(i) for i in inject or ())
        tunings = tuple(t if not isinstance(t, str) else parse_tuning(t) for t in tune or ())
        return cls(injections, tunings)

    def of(self, kind: type) -> tuple:
        """Every injection of one class, e.g. ``plan.of(SlowWorker)``."""
        return tuple(i for i in self.injections if isinstance(i, kind))

    def tuned(self, key: str, default: str | None = None) -> str | None:
        """The last value given for ``--tune key=...``, or ``default``."""
        for tuning in reversed(self.tunings):
            if tuning.key == key:
                return tuning.value
        return default

    def is_on(self, key: str) -> bool:
        return self.tuned(key, "off") == "on"

    @property
    def specs(self) -> dict:
        """The plan as spec strings, to pass to another process."""
        return {"inject": [i.spec for i in self.injections], "tune": [t.spec for t in self.tunings]}
