"""`kubectl taobrev suspend NAME` / `resume NAME`: set `spec.suspend`, which holds back admission
of a Pending job and nothing else (controller/api/models.py). A job already admitted runs on
whatever spec.suspend says, so `suspend` refuses it and says so instead of pretending: `cancel`
is what stops a run.

The patch carries the resourceVersion the check was made on, so a job admitted between the read
and the write makes the API server refuse the patch (Conflict) and the check runs again."""

from __future__ import annotations

import argparse
from collections.abc import Mapping
from datetime import datetime
from typing import Any

from controller.plugin import jobs
from controller.plugin.kubectl import Kubectl, PluginError, add_connection_flags

ATTEMPTS = 3
GITOPS = """GitOps: suspend and resume change spec.suspend in the cluster, which then differs from git;
Argo CD (self-heal) or Flux puts git's value back at its next sync unless told to ignore the field
(Argo CD: ignoreDifferences on /spec/suspend; Flux: change it in git instead). With GitOps, the
change belongs in git; `kubectl taobrev cancel` (an annotation) does not touch spec.
"""
SUSPEND_HELP = "hold a Pending job back from admission (spec.suspend: true); a running job runs on"
RESUME_HELP = "let a suspended job be admitted in its turn (spec.suspend: false)"
SUSPEND_EXAMPLES = f"""spec.suspend holds back admission only: nothing is created while it is true. A job
already admitted (Provisioning, Running, ...) keeps running: suspend refuses it (exit 1);
`kubectl taobrev cancel NAME` stops a run and keeps the object.

{GITOPS}
examples:
  kubectl taobrev suspend train-7
  kubectl taobrev suspend train-7 -n ml-team

exit codes: 0 suspended (or already), 1 error, or the job was already admitted or finished
"""
RESUME_EXAMPLES = f"""{GITOPS}
examples:
  kubectl taobrev resume train-7 -n ml-team

exit codes: 0 resumed (or was not suspended), 1 error
"""
# Labels and annotations by which Argo CD and Flux mark what they manage.
GITOPS_MARKS = (
    "argocd.argoproj.io/instance",
    "argocd.argoproj.io/tracking-id",
    "app.kubernetes.io/instance",
    "kustomize.toolkit.fluxcd.io/name",
    "helm.toolkit.fluxcd.io/name",
)


def register(sub: Any) -> None:
    for name, help_, examples, handler in (
        ("suspend", SUSPEND_HELP, SUSPEND_EXAMPLES, run_suspend),
        ("resume", RESUME_HELP, RESUME_EXAMPLES, run_resume),
    ):
        parser = sub.add_parser(
            name, help=help_, description=f"kubectl taobrev {name}: {help_}.", epilog=examples,
            formatter_class=argparse.RawDescriptionHelpFormatter,
        )  # fmt: skip
        parser.add_argument("name", help="the job")
        add_connection_flags(parser)
        parser.set_defaults(run=handler)


def suspend_patch(value: bool, resource_version: str | None) -> dict[str, Any]:
    """spec.suspend, on the condition that the object is still the one that was checked."""
    patch: dict[str, Any] = {"spec": {"suspend": value}}
    if resource_version:
        patch["metadata"] = {"resourceVersion": resource_version}
    return patch


def refusal(job: Mapping[str, Any]) -> str | None:
    """Why suspending this job would change nothing (None: it is not admitted yet)."""
    st, name = jobs.status(job), jobs.name(job)
    if jobs.finished(st):
        return (
            f"taobrevjob/{name} has already finished (outcome {st.get('outcome') or '-'}); nothing to suspend"
        )
    if jobs.admitted(st):
        return (
            f"taobrevjob/{name} was already admitted (phase {jobs.phase(st)}): spec.suspend only holds "
            f"back admission, so the run continues and spec was left unchanged. To stop the run and "
            f"keep the object: kubectl taobrev cancel {name} -n {jobs.namespace(job)}"
        )
    return None


def gitops_note(job: Mapping[str, Any]) -> str | None:
    meta = jobs.metadata(job)
    marks = {**(meta.get("labels") or {}), **(meta.get("annotations") or {})}
    found = [m for m in GITOPS_MARKS if m in marks]
    if not found:
        return None
    return (
        f"note: this job looks managed by GitOps ({found[0]}): Argo CD or Flux will put git's "
        "spec.suspend back unless the field is ignored; make the change in git to keep it"
    )


def _conflict(exc: PluginError) -> bool:
    return "the object has been modified" in str(exc) or "Conflict" in str(exc)


def _patch(kubectl: Kubectl, name: str, value: bool, check: bool) -> dict[str, Any] | None:
    """The patched object, or None when spec.suspend already had that value."""
    for _ in range(ATTEMPTS):
        job = kubectl.job(name)
        if bool(jobs.spec(job).get("suspend")) == value:
            return None
        why = refusal(job) if check else None
        if why:
            raise PluginError(why)
        rv = jobs.metadata(job).get("resourceVersion")
        try:
            return kubectl.merge_patch(name, suspend_patch(value, rv))
        except PluginError as exc:
            if not _conflict(exc):
                raise
    raise PluginError(f"taobrevjob/{name} kept changing while spec.suspend was set; try again")


def run_suspend(args: argparse.Namespace, kubectl: Kubectl, now: datetime) -> int:
    patched = _patch(kubectl, args.name, True, check=True)
    if patched is None:
        print(f"taobrevjob/{args.name} is already suspended (spec.suspend: true)")
        return 0
    print(
        f"taobrevjob/{args.name} suspended: it will not be admitted while spec.suspend is true; "
        f"nothing is created. Resume: kubectl taobrev resume {args.name} -n {jobs.namespace(patched)}"
    )
    note = gitops_note(patched)
    if note:
        print(note)
    return 0


def run_resume(args: argparse.Namespace, kubectl: Kubectl, now: datetime) -> int:
    patched = _patch(kubectl, args.name, False, check=False)
    if patched is None:
        print(f"taobrevjob/{args.name} is not suspended; nothing to do")
        return 0
    st = jobs.status(patched)
    after = (
        "it is admitted in its turn under the quotas" if not jobs.finished(st) else "it has already finished"
    )
    print(f"taobrevjob/{args.name} resumed (spec.suspend: false): {after}")
    note = gitops_note(patched)
    if note:
        print(note)
    return 0
