"""What a job would do, before it does anything (PURE): the plan written for `spec.dryRun`.

Built from the spec and the pre-flight's verdict: the instance types Brev would be asked for (in
fallback order, with their hourly price), the images pulled on the instance, what is staged from
and uploaded to S3, and the most the job can bill. The ceiling is what the job's own limits allow
— every phase's timeout over every attempt, capped by spec.budget — at the dearest candidate's
price: the worst case, not an estimate.
"""

from __future__ import annotations

from controller.api.container_paths import DATA_ROOT, RESULTS_DIR
from controller.api.models import TaoBrevJobSpec
from controller.api.status import PlanStatus
from controller.lifecycle.steps import Verdict

# Phases an instance bills in (Pending creates nothing).
_BILLED_TIMEOUTS = (
    "provisioning_seconds",
    "waiting_exec_seconds",
    "pulling_seconds",
    "running_seconds",
    "uploading_seconds",
    "deleting_seconds",
)


def priced(instance_type: str, price: float | None) -> str:
    return f"{instance_type} (${price:.2f}/h)" if price is not None else f"{instance_type} (price unknown)"


def build_plan(spec: TaoBrevJobSpec, verdict: Verdict | None) -> PlanStatus:
    ephemeral = spec.instance.ephemeral
    results = spec.data.results_uri.rstrip("/")
    uploads = [f"{results}/results/ <- {RESULTS_DIR}", f"{results}/logs/ <- the container log"]
    if spec.steps:  # a workflow: each step's results and log when it ends
        uploads = [f"{results}/{s.name}/ <- step {s.name}'s {RESULTS_DIR}" for s in spec.steps]
        uploads.append(f"{results}/logs/<step>/ <- each step's container log")
    attempts = spec.recovery.max_attempts if ephemeral is not None else 1
    if attempts > 1:
        uploads.append(
            f"{results}/checkpoints/<job id>/ <- {RESULTS_DIR} every "
            f"{spec.recovery.checkpoint_interval_seconds}s while it runs"
        )
    plan = PlanStatus(
        planned_at=verdict.checked_at if verdict is not None else None,
        instance_types=[priced(t, p) for t, p in (verdict.candidates if verdict else ())][:16],
        reuse=spec.instance.reuse.name if spec.instance.reuse is not None else None,
        images=list(verdict.images) if verdict is not None else spec.images(),
        inputs=[f"{i.uri} -> {DATA_ROOT}/{i.path}" for i in spec.data.inputs],
        uploads=uploads,
        ready=verdict.passed if verdict is not None else None,
    )
    if ephemeral is None:
        return plan  # a reused instance bills its owner, not this job
    per_attempt = sum(getattr(spec.timeouts, t) for t in _BILLED_TIMEOUTS)
    billed = per_attempt * attempts
    if spec.budget.max_billed_seconds is not None:
        billed = min(billed, spec.budget.max_billed_seconds)
    plan.max_billed_seconds = billed
    prices = [p for _, p in (verdict.candidates if verdict else ())]
    if prices and None not in prices:
        ceiling = billed / 3600 * max(p for p in prices if p is not None)
        if spec.budget.max_cost_dollars is not None:
            ceiling = min(ceiling, spec.budget.max_cost_dollars)
        plan.cost_ceiling_dollars = round(ceiling, 2)
    return plan


def summary(plan: PlanStatus) -> str:
    """One line for status.message and the Event."""
    where = (
        f"on instance {plan.reuse}"
        if plan.reuse
        else f"create {', then '.join(plan.instance_types[:3]) or 'an instance (types unknown)'}"
    )
    cost = f", at most ${plan.cost_ceiling_dollars:.2f}" if plan.cost_ceiling_dollars is not None else ""
    billed = f" ({plan.max_billed_seconds}s billed{cost})" if plan.max_billed_seconds is not None else ""
    return f"would {where}{billed}, pull {', '.join(plan.images)}"
