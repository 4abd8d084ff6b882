"""The tail after the run ended (PURE): stop the container within its grace, upload results and
logs, then, in phase Deleted, clean up the instance, delete an instance this job created and
confirm it released.

An instance this job created is released only when `brev delete` answers not found, or the delete
was accepted and the instance is then absent from `absent_listings` listings. If the logged-in
identity is not the one that asked for the instance, its listings (made with --all) and accepted
deletes still count, but its "not found" does not: the job is Stalled (InstanceNotAccessible,
naming the fix) until the credential that created the instance is restored.

Every state after the run ended reaches `brev delete` of an owned instance within a stated bound
(P = poll interval, W = wait_timeout; each pass also bounded by the CLI's own timeouts):

- Provisioning/WaitingExec/Pulling with an outcome: teardown in the same pass.
- Running with an outcome (cancel, timeout): stop + bounded waits for `Tunables.grace`
  (TAOBREV_STOP_GRACE, 60 s; each wait bounded by the grace left); then Uploading whether or
  not the container exited. Unlisted (suspected lost): N listings (N x P) without exec
  evidence, then Uploading at once.
- Uploading after InstanceNotListed: one upload attempt; still unlisted, teardown.
- Uploading: `spec.timeouts.uploadingSeconds`, counted from entering the phase, but never before
  one upload attempt (so operator downtime cannot skip the upload); a permanent upload failure
  goes to teardown at once.
- Deleted, cleanup on an instance we delete: one attempt; any failure is noted and skipped.
- Deleted, kept for debugging (spec.debug.keepInstanceOnFailure, <= 24 h; controller/lifecycle/
  keep.py): the delete is sent at `instance.keptUntil`, or at once on deletion, a cancel or a
  reached budget; only a cleanup that removed the secrets starts a keep.
- Deleted, cleanup on a reused instance: retried with backoff (<= backoff_max) without end; after
  `cleanup_attempts` failures the job is Stalled (SecretsMayRemain) — never a silent finish.
- Deleted, delete: sent in the first teardown pass; re-sent with backoff while it fails, and
  while the instance is listed but not DELETING after `create_settle`; past deletingSeconds a
  Warning Event, and it keeps trying (giving up would leave it billing).
- Never created: absence is concluded only `create_settle` after the last create returned, or,
  when its return was never seen, `create_in_flight_max + create_settle` after it was sent.
"""

from __future__ import annotations

from datetime import timedelta

from controller.api import reasons
from controller.api.models import phase_timeout
from controller.api.status import ResultsSummary
from controller.api.timestamps import format_time
from controller.api.vocabulary import Outcome
from controller.brev.client import DELETING, RUNNING, Instance
from controller.lifecycle import keep, workflow
from controller.lifecycle.absence import process_instance_fate
from controller.lifecycle.decision_pass import Pass
from controller.lifecycle.phases import Phase, entered_any
from controller.lifecycle.release import instance_released
from controller.lifecycle.status_text import clip
from controller.lifecycle.steps import EventNote, UploadResults


def upload_trouble(p: Pass, error: str) -> str:
    """What a failed upload attempt tells the user (issue 32): what went wrong, how to fix it, and
    until when the results stay on the instance. At that deadline (spec.timeouts.uploadingSeconds
    after the upload began, never before one attempt) the job fails UploadFailed and the instance
    is deleted with them: billing must stop, and an instance kept for results nobody can reach
    would bill without end."""
    entered = p.s.phase_times.get(str(Phase.UPLOADING))
    limit = phase_timeout(p.spec, Phase.UPLOADING)
    where = p.spec.data.results_uri if p.spec is not None else "the results location"
    until = (
        f"until {format_time(entered + timedelta(seconds=limit))}"
        if entered is not None and limit is not None
        else "until spec.timeouts.uploadingSeconds runs out"
    )
    secret = f" and the keys in Secret {p.spec.credentials.s3.name}" if p.spec is not None else ""
    return clip(
        f"upload to {where} failed: {error}; fix the bucket{secret} (spec.credentials.s3); the "
        f"results stay on instance {p.instance} {until}, then it is deleted and they are lost"
    )


def upload_failed(p: Pass, message: str) -> None:
    # Billing must stop even if results cannot be saved: tear down, and say so.
    p.s.run_outcome = Outcome.FAILED
    p.s.reason = reasons.UPLOAD_FAILED
    p.s.message = clip(message)
    p.events.append(EventNote("Warning", reasons.UPLOAD_FAILED, p.s.message))
    p.enter(Phase.DELETED, "tearing down without results")
    teardown(p)


def upload_skipped(p: Pass) -> None:
    """The job is being deleted or was canceled (taobrev.io/cancel) and an upload attempt failed
    (the instance refuses ssh, or the copy broke): the results are given up and the instance
    deleted now, said in status and an Event; no cleanup on an instance being deleted. A run that
    had not been cancelled before (its upload was under way) ends as an upload failure; a
    cancelled one stays Canceled."""
    why = "the job is being deleted" if p.obs.deleting else "the job was canceled"
    note = (
        f"{why} and the upload from instance {p.instance} failed; results not uploaded, deleting the instance"
    )
    p.events.append(EventNote("Warning", reasons.UPLOAD_SKIPPED, note))
    if p.deletes_instance():
        # The files (and secrets) go with the instance: no cleanup call that would hang as the
        # upload did and hold up the delete by its whole timeout.
        p.s.run.cleaned(p.now)
    if p.s.run_outcome != Outcome.CANCELED:
        upload_failed(p, note)
        return
    p.s.teardown.waiting(note)
    p.s.message = clip(f"{p.s.message or ''}; results not uploaded (the upload from the instance failed)")
    p.enter(Phase.DELETED, note)
    teardown(p)


def uploading(p: Pass) -> None:
    if p.obs.upload is not None:
        p.s.upload.uploaded(
            p.now,
            ResultsSummary(
                uri=p.spec.data.results_uri if p.spec is not None else None,
                objects=p.obs.upload.objects,
                bytes=p.obs.upload.bytes,
            ),
        )
        if p.s.run_outcome == Outcome.SUCCEEDED:
            # The one place a run becomes Succeeded: its results are verified in S3.
            p.s.reason = reasons.SUCCEEDED
            p.s.message = clip(
                f"training exited 0; results verified in S3 ({p.obs.upload.objects} objects, "
                f"{p.obs.upload.bytes} bytes)"
            )
            p.events.append(EventNote("Normal", reasons.SUCCEEDED, p.s.message))
        p.enter(Phase.DELETED, f"uploaded {p.obs.upload.objects} objects; tearing down")
        teardown(p)
        return
    if _nothing_to_upload(p):
        return
    attempts = p.s.upload.attempts or 0
    fate = process_instance_fate(p)
    if fate is not None and attempts:
        # Nothing left to upload from: say so (the results are lost), whatever the run's outcome.
        p.s.run_outcome = Outcome.FAILED
        p.s.reason, message = fate
        p.s.message = f"{message}; the results were not uploaded"
        p.events.append(EventNote("Warning", p.s.reason, p.s.message))
        p.enter(Phase.DELETED, "tearing down")
        teardown(p)
        return
    if p.actions:
        return  # confirming the instance's absence first
    canceled = p.obs.deleting or p.s.reason == reasons.CANCELED_BY_USER
    if canceled and attempts and p.s.retries:
        # Cancelled and the last upload did not go through: do not bill up to uploadingSeconds
        # for results nobody waits for (issue 25, scenario 10).
        upload_skipped(p)
        return
    if p.timed_out() and attempts:
        limit = phase_timeout(p.spec, Phase.UPLOADING)
        upload_failed(p, f"upload did not finish within {limit}s (spec.timeouts.uploadingSeconds)")
        return
    p.actions.append(UploadResults(p.instance, step=workflow.upload_step(p)))
    p.requeue = 0.0


def _nothing_to_upload(p: Pass) -> bool:
    """No spec, the instance lost, or still unlisted after the one reach-what-we-can attempt:
    on to teardown (True when this step is done)."""
    unlisted = p.obs.instance_known and p.obs.instance is None and not p.exec_evidence()
    tried_unlisted = bool(p.s.upload.attempts) and p.s.reason == reasons.INSTANCE_NOT_LISTED and unlisted
    lost = p.s.reason in reasons.UNREACHABLE
    if p.spec is not None and not lost and not tried_unlisted:
        return False
    if p.start_phase == Phase.RUNNING:
        p.requeue = 0.0  # Uploading is written first; Deleted follows in the next step
        return True
    p.enter(Phase.DELETED, "tearing down without an upload")
    teardown(p)
    return True


def teardown(p: Pass) -> None:
    """Phase Deleted: remove what the job put on the instance, delete an instance we own, confirm
    it gone, then finish. An ephemeral instance is never abandoned: past deletingSeconds we keep
    trying (with backoff) and report it, because giving up would leave it billing."""
    name = p.s.instance.name
    if name and not _cleanup_done(p):
        return
    if name and keep.holds(p):
        return  # kept for debugging (spec.debug.keepInstanceOnFailure) until its deadline
    if name and p.deletes_instance() and not instance_released(p):
        return
    if p.s.run_outcome == Outcome.SUCCEEDED and p.s.upload.uploaded_at is None:
        # A run that exited 0 whose results never reached S3 (nothing left to upload from) did
        # not succeed: never a Succeeded without verified results.
        p.s.run_outcome = Outcome.FAILED
        p.s.reason = reasons.UPLOAD_FAILED
        p.s.message = clip(f"{p.s.message or 'training exited 0'}; the results were not uploaded")
    p.s.finished_at = p.now
    p.s.teardown.waiting(None)
    released = "deleted" if p.deletes_instance() else "left running (retained)"
    outcome = p.s.run_outcome or Outcome.CANCELED
    p.s.run_outcome = outcome
    results = (
        f"; results in {p.s.upload.results.uri}" if p.s.upload.uploaded_at and p.s.upload.results else ""
    )
    touched = not p.owned or p.asked_brev()
    instance = f"; instance {name} {released}" if name and touched else ""
    p.s.message = f"{outcome}: {p.s.message or ''}{results}{instance}"
    p.events.append(
        EventNote("Normal" if outcome == Outcome.SUCCEEDED else "Warning", reasons.FINISHED, p.s.message)
    )


def _cleanup_done(p: Pass) -> bool:
    """Container and job directory (with the secret files) removed, or nothing to remove."""
    if p.s.run.cleaned_up_at:
        return True
    if p.obs.cleaned or not _workload_may_exist(p):
        p.s.run.cleaned(p.now)
        p.unstall(reasons.SECRETS_MAY_REMAIN)
        keep.begin(p)  # a cleanup that kept the instance for debugging: from now on
        return True
    if not p.obs.instance_known:
        return False
    inst = p.obs.instance
    if inst is not None and inst.status == RUNNING:
        p.actions.append(keep.cleanup(p))
        p.requeue = 0.0
        return False
    if not p.deletes_instance() and _may_still_hold_secrets(p, inst):
        return False
    # Unreachable, gone, or goes with the instance: nothing of ours can be removed now.
    p.s.run.cleaned(p.now)
    return True


def _workload_may_exist(p: Pass) -> bool:
    """Secrets, spec or a container exist on the instance only once the job entered a phase
    that puts them there (the `workload` flag: Pulling on)."""
    return entered_any(p.s.phase_times, lambda r: r.workload)


def _may_still_hold_secrets(p: Pass, inst: Instance | None) -> bool:
    """A reused or retained instance keeps the job's container (its config carries the env) and
    maybe files until cleanup reaches it: never a silent finish."""
    if inst is None:
        # Missing from one listing proves nothing: it may still hold our secrets.
        return p.process_absence() < p.tun.absent_listings
    if inst.status == DELETING:
        return False  # going away, and our files with it
    # Cannot be reached now (STOPPED, STARTING, UNHEALTHY, FAILURE): say so, look again later.
    p.stall(
        reasons.SECRETS_MAY_REMAIN,
        f"instance {p.instance} is {inst.status}: container {p.s.job_id} and the job's files "
        f"(with its secrets) may remain on it; start it (`brev start {p.instance}`) so teardown "
        f"can remove them, or remove them by hand; retrying every {int(p.tun.backoff_max)}s",
    )
    return True
