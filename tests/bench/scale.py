"""One factor F for every duration of the benchmark: the simulator's nominal Brev durations, the
operator's interval/timeout settings and the job spec's phase timeouts. Pure: no I/O.

A setting whose floor (controller/settings.py, controller/api/models.py) is above nominal x F is
raised to the floor, and the table printed with the results says so: the run is then slower
(never faster) than the real ratio on that one knob.
"""

from __future__ import annotations

from dataclasses import dataclass

from annotated_types import Ge, Gt, Le
from pydantic.alias_generators import to_camel
from pydantic.fields import FieldInfo

from controller.api.models import Timeouts
from controller.settings import PREFIX, Settings

# Realistic nominal Brev durations (seconds at real speed) for the simulator's knobs
# (tests/brevsim/model.py NOMINAL names them; its defaults are shorter, made for tests).
# Boot 3-10 min -> 300 s deploying; the first exec of a fresh instance 600 s; a multi-GB TAO
# image pull 600 s; a results upload 120 s.
BREV_NOMINAL: dict[str, float] = {
    "deploy_s": 300.0,
    "ssh_delay_s": 600.0,
    "build_s": 15.0,
    "delete_s": 30.0,
    "stop_s": 20.0,
    "start_s": 30.0,
    "pull_seconds": 600.0,
    "epoch_seconds": 300.0,
    "upload_s": 120.0,
    "create_poll_s": 5.0,
    "ssh_wait_interval_s": 1.0,
}

# Operator settings scaled by F (their defaults are the nominal values).
SCALED_SETTINGS: tuple[str, ...] = (
    "poll_interval",
    "wait_timeout",
    "log_tail_interval",
    "progress_interval",
    "listing_max_age",
    "secret_max_age",
    "create_settle",
    "backoff_max",
    "exec_timeout",
    "pull_timeout",
    "probe_interval_max",
    "stop_grace",
    "exit_answer_timeout",
    "preflight_max_age",
    "secret_poll_interval",
    "orphan_sweep_interval",
    "orphan_grace",
    "brev_backoff_base",
    "brev_backoff_max",
    "node_cost_interval",
    "notify_backoff_base",
    "notify_backoff_max",
    "notify_status_interval",
)
# Rates (per second) scaled by 1/F: the same calls per nominal second.
SCALED_RATES: tuple[str, ...] = ("brev_rate",)

# Timing settings deliberately NOT scaled, and why (printed with the results).
UNSCALED_SETTINGS: dict[str, str] = {
    "kube_request_timeout": "the API server runs at real speed (it is not simulated)",
    "liveness_grace": "bounds the operator's own event-loop lateness, which is not simulated",
    "liveness_pass_timeout": "0 = pull_timeout + exec_timeout, both scaled",
    "leader_election": "off: one replica (lease durations are whole seconds >= 2, not scalable to F)",
    "leader_retry_period": "leader election is off (above)",
}


def _floor(field: FieldInfo) -> float:
    for meta in field.metadata:
        if isinstance(meta, Ge):
            return float(meta.ge)  # type: ignore[arg-type]
        if isinstance(meta, Gt):
            return float(meta.gt) + 0.01  # type: ignore[arg-type]
    return 0.0


def _rate(field: FieldInfo, value: float) -> float:
    for meta in field.metadata:
        if isinstance(meta, Le):
            return min(value, float(meta.le))  # type: ignore[arg-type]
    return value


@dataclass(frozen=True)
class Knob:
    """One scaled duration: where it goes, its nominal value, and what the run used."""

    name: str
    nominal: float  # seconds at real speed
    scaled: float  # nominal x F
    used: float  # what the run used: scaled, or the floor the field allows

    @property
    def floored(self) -> bool:
        return self.used > self.scaled + 0.5 * min(1.0, self.scaled)


@dataclass(frozen=True)
class Scale:
    factor: float
    # spec.timeouts are at least this many wall seconds: the simulated tools' fixed costs (one
    # aws CLI call takes ~10 s on a loaded 2-core machine) do not shrink with F, and a phase
    # failing on them would measure the machine, not the operator.
    timeout_floor: float = 60.0

    def __post_init__(self) -> None:
        if not 0 < self.factor <= 1:
            raise ValueError(f"--scale must be in (0, 1], got {self.factor}: it multiplies every duration")

    def wall(self, nominal_seconds: float) -> float:
        """Wall seconds of this run for `nominal_seconds` at real speed."""
        return nominal_seconds * self.factor

    def real(self, wall_seconds: float) -> float:
        """Real-speed seconds for `wall_seconds` measured in this run."""
        return wall_seconds / self.factor

    def brev_durations(self, epoch_seconds: float | None = None) -> dict[str, float]:
        """Nominal values for `BrevSim.set_faults` (the simulator multiplies them by its speed)."""
        out = dict(BREV_NOMINAL)
        if epoch_seconds is not None:
            out["epoch_seconds"] = epoch_seconds
        return out

    def settings(self) -> list[Knob]:
        knobs = []
        for name in SCALED_SETTINGS:
            field = Settings.model_fields[name]
            nominal = float(field.default)
            scaled = nominal * self.factor
            knobs.append(Knob(PREFIX + name.upper(), nominal, scaled, max(_floor(field), scaled)))
        return knobs

    def operator_env(self) -> dict[str, str]:
        env = {k.name: f"{k.used:.6g}" for k in self.settings()}
        for name in SCALED_RATES:
            field = Settings.model_fields[name]
            env[PREFIX + name.upper()] = f"{_rate(field, float(field.default) / self.factor):.6g}"
        env[PREFIX + "LEADER_ELECTION"] = "false"
        return env

    def timeouts(self) -> dict[str, int]:
        """spec.timeouts (camelCase, whole seconds, at least the model's minimum)."""
        out = {}
        for name, field in Timeouts.model_fields.items():
            if field.default is None:
                continue  # unset by default (queuedSeconds: no deadline in the queue)
            floor = max(_floor(field), self.timeout_floor)
            out[to_camel(name)] = max(int(floor), round(float(field.default) * self.factor))
        return out

    def timeout_knobs(self) -> list[Knob]:
        used = self.timeouts()
        return [
            Knob(
                f"spec.timeouts.{to_camel(n)}",
                float(f.default),
                float(f.default) * self.factor,
                float(used[to_camel(n)]),
            )
            for n, f in Timeouts.model_fields.items()
            if f.default is not None
        ]
