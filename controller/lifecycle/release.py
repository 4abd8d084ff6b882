"""How an instance this job created is released (PURE): delete it, then confirm it gone.

An instance this job created is released only when `brev delete` answers not found, or the delete
was accepted and the instance is then absent from `absent_listings` listings. If the logged-in
identity is not the one that asked for the instance, its listings (made with --all) and accepted
deletes still count, but its "not found" does not: the job is Stalled (InstanceNotAccessible,
naming the fix) until the credential that created the instance is restored. Never created:
absence is concluded only `create_settle` after the last create returned, or, when its return
was never seen, `create_in_flight_max + create_settle` after it was sent.

Used by teardown (phase Deleted) and by recovery (a previous attempt's instance, from
Provisioning), so neither phase's module imports the other's.
"""

from __future__ import annotations

from controller.api import reasons
from controller.brev.client import DELETING
from controller.lifecycle.decision_pass import Pass
from controller.lifecycle.steps import DeleteInstance, EventNote


def instance_released(p: Pass) -> bool:
    """Whether the current instance is confirmed deleted, asking brev to delete it if needed:
    `brev delete` answers not found, or the delete was accepted and the instance stays unlisted
    for `absent_listings` listings. Teardown's last step, and how recovery releases a previous
    attempt's instance before the next create."""
    if not p.asked_brev():
        return True  # no create was ever sent: nothing of ours can exist
    if not p.obs.instance_known or p.process_ambiguity():
        return False
    differs = p.process_identity()
    if p.obs.delete_not_found:
        if not differs:
            if p.s.reason == reasons.INSTANCE_NOT_LISTED:
                p.s.reason = reasons.INSTANCE_LOST  # now confirmed
                p.s.message = f"{p.s.message}; brev delete confirms it is gone"
            return True
        p.not_accessible()
        return False
    if p.obs.delete_requested:
        p.s.instance.delete_accepted(p.now)
        p.unstall(reasons.INSTANCE_NOT_ACCESSIBLE)  # brev found it and is deleting it
    inst = p.obs.instance
    if inst is not None:
        p.seen(inst)
        stale = p.since(p.s.instance.delete_requested_at) > p.tun.create_settle
        if (
            inst.status != DELETING
            and not p.obs.delete_requested
            and (stale or not p.s.instance.delete_accepted_at)
        ):
            _delete(p)
        _warn_if_slow(p)
        return False
    return _released_unlisted(p)


def _released_unlisted(p: Pass) -> bool:
    # Not listed. A create that may still be on its way must settle before absence means anything.
    if p.s.instance.id is None and (
        p.since(p.settle_from()) <= p.tun.create_settle or _create_may_be_in_flight(p)
    ):
        # status.message keeps saying why the job ended; InstanceReleased says teardown goes on.
        p.s.teardown.waiting(f"waiting to confirm that instance {p.instance} was never created")
        return False
    if p.obs.delete_requested:
        p.present()  # brev just resolved it: it exists, listed or not
        return False
    n = p.process_absence()
    if p.s.instance.delete_accepted_at and n >= p.tun.absent_listings:
        return True
    if p.process_identity():
        if not p.s.instance.delete_accepted_at:
            p.not_accessible()
        # else: brev accepted the delete; this identity's listings confirm it (not Stalled).
        return False
    if p.since(p.s.instance.delete_requested_at) >= p.tun.poll_interval:
        _delete(p)  # "not found" under the creating identity is the proof
    _warn_if_slow(p)
    return False


def _create_may_be_in_flight(p: Pass) -> bool:
    """The last create was sent and its call was never seen returning (its pass was cancelled, or
    the process that sent it crashed or lost the Lease): it may still land until the longest a
    create can be in flight has passed, plus the settle time. Before that even `brev delete`'s
    "not found" proves nothing."""
    sent, returned = p.s.instance.create_requested_at, p.s.instance.create_returned_at
    if sent is None or (returned is not None and returned >= sent):
        return False
    return p.since(sent) <= p.tun.create_in_flight_max + p.tun.create_settle


def _delete(p: Pass) -> None:
    p.s.instance.delete_sent(p.now)
    p.actions.append(DeleteInstance(p.target))
    p.events.append(EventNote("Normal", reasons.INSTANCE_DELETE_REQUESTED, f"brev delete {p.target}"))


def _warn_if_slow(p: Pass) -> None:
    if not p.timed_out():
        return
    note = (
        f"instance {p.instance} still not confirmed deleted {int(p.phase_age())}s into teardown; still trying"
    )
    if not (p.s.teardown.message or "").startswith(f"instance {p.instance} still not confirmed"):
        p.events.append(EventNote("Warning", reasons.INSTANCE_NOT_RELEASED, note))
    p.s.teardown.waiting(note)
    if not p.actions:
        p.requeue = p.tun.backoff_max
