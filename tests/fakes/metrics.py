"""A Recorder that records nothing: the model test runs hundreds of thousands of passes, and
Prometheus label bookkeeping would be a fifth of their cost. The component tier keeps the real
one. Catch-all signatures, so a Recorder method gaining an argument does not break the fake."""

from __future__ import annotations

from typing import Any

from controller.observability.metrics import Recorder


class NullRecorder(Recorder):
    def __init__(self) -> None:  # no super(): no registry, no metrics
        pass

    def build_info(self, *args: Any, **kwargs: Any) -> None:
        return None

    def queued(self, *args: Any, **kwargs: Any) -> None:
        return None

    def brev_call(self, *args: Any, **kwargs: Any) -> None:
        return None

    def reconcile_error(self, *args: Any, **kwargs: Any) -> None:
        return None

    def reconcile_duration(self, *args: Any, **kwargs: Any) -> None:
        return None

    def phase_changed(self, *args: Any, **kwargs: Any) -> None:
        return None

    def job_state(self, *args: Any, **kwargs: Any) -> None:
        return None

    def outcome(self, *args: Any, **kwargs: Any) -> None:
        return None

    def job_forgotten(self, *args: Any, **kwargs: Any) -> None:
        return None

    def instance_uptime(self, *args: Any, **kwargs: Any) -> None:
        return None

    def instance_released(self, *args: Any, **kwargs: Any) -> None:
        return None

    def exit_to_teardown(self, *args: Any, **kwargs: Any) -> None:
        return None

    def job_progress(self, *args: Any, **kwargs: Any) -> None:
        pass

    def job_billing(self, *args: Any, **kwargs: Any) -> None:
        return None

    def node_costs(self, *args: Any, **kwargs: Any) -> None:
        return None

    def node_deleted(self, *args: Any, **kwargs: Any) -> None:
        return None
