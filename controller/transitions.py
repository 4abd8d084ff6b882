"""The phase graph of a TaoBrevJob and each phase's time limit (PURE)."""

from __future__ import annotations

from collections.abc import Mapping

from controller.models import Phase, TaoBrevJobSpec, Timeouts

# Allowed transitions, as data: anything else is a bug in decide() (checked by unit tests).
TRANSITIONS: Mapping[Phase, frozenset[Phase]] = {
    Phase.PENDING: frozenset({Phase.PROVISIONING, Phase.DELETED}),
    Phase.PROVISIONING: frozenset({Phase.WAITING_EXEC, Phase.DELETED}),
    # Back to Provisioning: the attempt ended and another one follows (controller/recovery.py).
    Phase.WAITING_EXEC: frozenset({Phase.PULLING, Phase.DELETED, Phase.PROVISIONING}),
    Phase.PULLING: frozenset({Phase.RUNNING, Phase.DELETED, Phase.PROVISIONING}),
    Phase.RUNNING: frozenset({Phase.UPLOADING, Phase.PROVISIONING}),
    Phase.UPLOADING: frozenset({Phase.DELETED}),
    Phase.DELETED: frozenset(),
}


def phase_timeout(spec: TaoBrevJobSpec | None, phase: Phase) -> int | None:
    t = spec.timeouts if spec is not None else Timeouts()
    return {
        Phase.PROVISIONING: t.provisioning_seconds,
        Phase.WAITING_EXEC: t.waiting_exec_seconds,
        Phase.PULLING: t.pulling_seconds,
        Phase.RUNNING: t.running_seconds,
        Phase.UPLOADING: t.uploading_seconds,
        Phase.DELETED: t.deleting_seconds,
    }.get(phase)
