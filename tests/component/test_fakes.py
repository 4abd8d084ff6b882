"""The fake world keeps the Brev contract the operator relies on (SIM-CONTRACT.md sections 3, 4):
a fake that is kinder than Brev would let the component and model tiers pass wrongly."""

from __future__ import annotations

import asyncio
from collections.abc import Coroutine
from typing import Any, TypeVar

import pytest

from controller.api.errors import (
    BrevPermanentError,
    BrevTransientError,
    InstanceNotFound,
    SecretAccessDenied,
    StatusRejected,
)
from controller.brev.client import DELETING, DEPLOYING, RUNNING, BrevClient, CreateRequest
from controller.lifecycle import machine
from tests.fakes.brev import ORG_ID, FakeBrev, Faults
from tests.fakes.clock import FakeClock
from tests.fakes.kube import FakeKube, merge_patch

T = TypeVar("T")


def run(coro: Coroutine[Any, Any, T]) -> T:
    return asyncio.run(coro)


def world(**faults: Any) -> FakeBrev:
    return FakeBrev(FakeClock(), faults=Faults(**faults))


def names(w: FakeBrev) -> list[str]:
    return [i.name for i in run(w.list_instances())]


def test_a_misspelled_fault_is_refused() -> None:
    w = world()
    with pytest.raises(TypeError):
        w.set_faults(exec_hang=1)


def test_instance_lifecycle_follows_the_clock() -> None:
    w = world(deploy_s=60, sshd_lag_s=20, deleting_s=30, delete_lag_s=10)
    run(w.create_instance(CreateRequest(name="a")))
    assert [i.status for i in run(w.list_instances())] == [DEPLOYING]
    w.clock.advance(60)
    assert [i.status for i in run(w.list_instances())] == [RUNNING]
    with pytest.raises(BrevTransientError):
        run(w.ssh_exec("a", "echo ok", timeout=10))  # RUNNING is not ssh-ready
    w.clock.advance(20)
    assert run(w.ssh_exec("a", "echo ok", timeout=10)).stdout == "ok\n"
    run(w.delete_instance("a"))
    assert [i.status for i in run(w.list_instances())] == [RUNNING]  # accepted, still listed
    w.clock.advance(10)
    assert [i.status for i in run(w.list_instances())] == [DELETING]
    w.clock.advance(30)
    assert run(w.list_instances()) == []
    with pytest.raises(InstanceNotFound):
        run(w.delete_instance("a"))


def test_create_of_an_existing_name_is_adopted_and_ids_never_repeat() -> None:
    w = world(deleting_s=0)
    first = run(w.create_instance(CreateRequest(name="a")))
    again = run(w.create_instance(CreateRequest(name="a")))
    assert not first.adopted
    assert again.adopted
    run(w.delete_instance("a"))
    run(w.create_instance(CreateRequest(name="a")))
    ids = [c.id for c in w.accepted_creates("a")]
    assert len(ids) == 2
    assert len(set(ids)) == 2


def test_token_login_lists_and_touches_only_its_own_instances() -> None:
    w = world()
    w.add_instance("mine")
    w.add_instance("theirs", owner="bob")
    w.switch_identity("alice", login="token")
    w.list_all = False
    assert names(w) == ["mine"]
    w.list_all = True
    assert sorted(names(w)) == ["mine", "theirs"]
    with pytest.raises(InstanceNotFound):
        run(w.delete_instance("theirs"))  # even with --all: not this identity's to delete
    assert w.live(w.by_name("theirs")[0].id)


def test_delete_under_another_identity_answers_not_found() -> None:
    w = world()
    run(w.create_instance(CreateRequest(name="a")))
    w.switch_identity("bob", login="token")
    with pytest.raises(InstanceNotFound):
        run(w.delete_instance("a"))
    assert [d.outcome for d in w.deletes] == ["not-found"]


def test_duplicate_names_resolve_like_the_cli() -> None:
    w = world()
    w.add_instance("dup")
    w.add_instance("dup")
    with pytest.raises(BrevPermanentError, match="multiple instances"):
        run(w.delete_instance("dup"))
    only = w.by_name("dup")[0].id
    run(w.delete_instance(only))  # by id: unambiguous
    assert not w.live(only)


def test_omitted_instance_is_missing_from_exactly_n_listings() -> None:
    w = world()
    w.add_instance("a")
    w.omit("a", 2)
    assert [names(w) for _ in range(3)] == [[], [], ["a"]]


def test_listing_lag_hides_a_new_instance() -> None:
    w = world(listing_lag_s=30)
    run(w.create_instance(CreateRequest(name="a")))
    assert names(w) == []
    w.clock.advance(30)
    assert names(w) == ["a"]


def test_a_hang_costs_the_whole_timeout_then_fails() -> None:
    w = world(exec_hangs=1)
    w.add_instance("a")
    with pytest.raises(BrevTransientError, match="exec"):
        run(w.ssh_exec("a", "true", timeout=150))
    assert w.clock.elapsed == 150
    assert run(w.ssh_exec("a", "true", timeout=150)).ok


def test_create_accepted_but_timed_out_leaves_the_instance() -> None:
    w = world(create_timeouts=1, create_s=200)
    with pytest.raises(BrevTransientError):
        run(w.create_instance(CreateRequest(name="a")))
    assert w.clock.elapsed == 200
    assert len(w.accepted_creates("a")) == 1
    assert run(w.create_instance(CreateRequest(name="a"))).adopted


def test_status_patch_merges_and_refuses_oversize_lists_like_kube_access() -> None:
    assert merge_patch({"a": 1, "b": {"c": 2, "d": 3}}, {"a": None, "b": {"c": None, "e": 4}}) == {
        "b": {"d": 3, "e": 4}
    }
    kube = FakeKube(max_list_items=4)
    kube.create("ns", "j", "u", {})

    def attempts(tail: list[str]) -> list[dict[str, Any]]:
        return [{"attempt": 1, "instance": {"name": "i"}, "run": {"exitCode": 0, "logTail": tail}}]

    assert run(kube.patch_status("ns", "j", {"attempts": attempts(["a", "b"])}))
    # Refused (422: the nested logTail is too long), then trimmed to the last 5 lines: still too
    # long; then minimal (no log tail; lists are replaced whole, so the stored tail goes too).
    assert run(kube.patch_status("ns", "j", {"phase": "Running", "attempts": attempts(list("abcdef"))}))
    assert len(kube.rejected) == 2
    assert kube.get("ns", "j") is not None
    assert kube.objects[("ns", "j")].status == {
        "phase": "Running",
        "attempts": [{"attempt": 1, "instance": {"name": "i"}, "run": {"exitCode": 0}}],
    }
    with pytest.raises(StatusRejected):
        run(kube.patch_status("ns", "j", {"conditions": list("abcdef"), "phase": list("abcdef")}))
    kube.release("ns", "j")
    assert not run(kube.patch_status("ns", "j", {"phase": "Running"}))


def test_secret_reads_answer_like_kube_access() -> None:
    kube = FakeKube()
    kube.add_secret("ns", "ngc", {"api-key": b"k"})
    kube.deny_secret("ns", "locked")
    assert run(kube.read_secret("ns", "ngc")) == {"api-key": b"k"}
    assert run(kube.read_secret("ns", "missing")) is None
    with pytest.raises(SecretAccessDenied):
        run(kube.read_secret("ns", "locked", operator_own=True))


def test_identities_follow_the_real_client_format() -> None:
    w = world()
    alice_key = run(w.identity())
    assert alice_key.startswith(f"org-key:{ORG_ID}:")
    w.switch_identity("carol", login="api-key")  # another key of the same org
    carol_key = run(w.identity())
    assert carol_key != alice_key
    assert machine.same_reach(alice_key, carol_key)
    w.switch_identity("bob", login="token")
    assert run(w.identity()) == "user:bob"
    assert not machine.same_reach(alice_key, "user:bob")


def test_the_fake_is_a_brev_client() -> None:
    client: BrevClient = world()  # mypy checks the protocol
    assert run(client.list_instances()) == []
