"""Whether the instance is still there (PURE): listing facts, suspected loss, confirmed absence.

Absence is confirmed, never assumed. The instance is matched by Brev's id once seen. A listing
without it makes it *suspected* lost (`absence.listings`); only after `Tunables.absent_listings`
(>= 3) consecutive listings, spaced by the poll interval, with no exec evidence in between, and
a probe that does not answer (a container that runs: `docker wait` is a long poll a leader change
or a restart cuts short, so a healthy run can go three listings without evidence), does the
machine act: if a container ran, the run ends as InstanceNotListed and one upload of what can
be reached is tried first; then `brev delete` (by id, under the identity that created the
instance) decides, and only its "not found" turns the reason into InstanceLost.
"""

from __future__ import annotations

from enum import StrEnum

from controller.api import reasons
from controller.brev.client import DELETING, FAILURE
from controller.lifecycle.decision_pass import Pass
from controller.lifecycle.steps import DeleteInstance, EventNote, ProbeExec


def _confirm_lost(p: Pass) -> tuple[str, str] | None:
    """The instance is not in this listing. Suspected lost until `absent_listings` listings (with
    no exec evidence) say so; then `brev delete` (owned) decides. Returns (reason, message) once
    confirmed."""
    if p.exec_evidence():
        p.present()  # it answered exec in this pass: it exists, whatever the listing says
        return None
    n = p.process_absence()
    if n < p.tun.absent_listings or _probe_first(p):
        return None
    where = f"instance {p.instance} ({p.s.instance.id or 'no id seen'})"
    over = int(p.since(p.s.instance.absence.since))
    gone = f"{where} disappeared: not listed in {n} consecutive listings over {over}s"
    if not p.owned:
        # Not ours to delete: enough listings are the most we can learn.
        return reasons.INSTANCE_LOST, gone
    if p.process_identity():
        p.not_accessible()  # only the creating identity's "not found" would be proof
        return None
    if p.s.run.started_at is not None and not p.s.upload.attempts:
        # A container ran: its results may still be reachable. Upload first; the delete in
        # teardown then confirms (InstanceNotListed until it does, never InstanceLost).
        p.events.append(EventNote("Warning", reasons.INSTANCE_NOT_LISTED, gone))
        return reasons.INSTANCE_NOT_LISTED, f"{gone}; uploading what can be reached, then deleting it"
    return _confirm_by_delete(p, gone)


def _probe_first(p: Pass) -> bool:
    """Ask the instance itself before acting on listings: a running container that answers a
    probe is there, whatever three listings said (the simulation found healthy runs deleted and
    re-created on listing glitches alone). Only while the container runs: after an exit a VM
    going away may still answer for a moment (run_phases._answers_after_exit), and before a
    container started the phase's own probes are the evidence."""
    running = p.s.run.started_at is not None and p.s.run.exited_at is None
    if not running or p.obs.did(ProbeExec):
        return False  # probed in this pass: it did not answer (an answer is exec evidence)
    p.actions.append(ProbeExec(p.instance))
    p.requeue = 0.0
    return True


def _confirm_by_delete(p: Pass, gone: str) -> tuple[str, str] | None:
    if p.obs.delete_not_found or p.obs.delete_requested:
        if p.obs.delete_requested:
            p.s.instance.delete_accepted(p.now)
        how = (
            "brev delete answers not found"
            if p.obs.delete_not_found
            else "it was unreachable, so it was deleted"
        )
        return reasons.INSTANCE_LOST, f"{gone}; {how}"
    if p.since(p.s.instance.delete_requested_at) >= p.tun.poll_interval:
        p.s.instance.delete_sent(p.now)
        p.actions.append(DeleteInstance(p.target))
        p.events.append(
            EventNote(
                "Warning", reasons.INSTANCE_NOT_LISTED, f"{gone}; confirming with brev delete {p.target}"
            )
        )
        p.requeue = 0.0
    return None


class Listed(StrEnum):
    """What this pass's listing says of the instance (detect_listing), before anything is
    concluded from it."""

    UNKNOWN = "unknown"  # no listing in this pass
    AMBIGUOUS = "ambiguous"  # several instances of its name, none recorded as ours
    MISSING = "missing"  # not in the listing: suspected lost, never proof
    DELETING = "deleting"  # being deleted, not by this job
    FAILED = "failed"  # FAILURE
    PRESENT = "present"


def detect_listing(p: Pass) -> Listed:
    """A question: what the listing says (reads the observation, writes nothing)."""
    if not p.obs.instance_known:
        return Listed.UNKNOWN
    if p.obs.instance_ambiguous:
        return Listed.AMBIGUOUS
    inst = p.obs.instance
    if inst is None:
        return Listed.MISSING
    if inst.status == DELETING:
        return Listed.DELETING
    if inst.status == FAILURE:
        return Listed.FAILED
    return Listed.PRESENT


def process_instance_fate(p: Pass) -> tuple[str, str] | None:
    """None while the instance is (or may be) there; (reason, message) once it is confirmed lost
    or failed. Listing facts (DELETING, FAILURE) count at once; absence only when confirmed.
    The writer of the instance's presence facts (id, absence count) and of the ambiguity and
    identity stalls."""
    listed = detect_listing(p)
    if listed is Listed.UNKNOWN:
        return None
    if p.process_ambiguity():
        return None
    if listed is Listed.MISSING:
        return _confirm_lost(p)
    assert p.obs.instance is not None  # narrows: every other answer came from a listed instance
    p.process_identity()
    p.seen(p.obs.instance)
    if listed is Listed.DELETING:
        return reasons.INSTANCE_LOST, f"instance {p.instance} is being deleted (not by this job)"
    if listed is Listed.FAILED:
        return reasons.INSTANCE_FAILED, f"instance {p.instance} went to FAILURE during {p.phase}"
    return None
