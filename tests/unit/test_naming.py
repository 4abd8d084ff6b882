"""Instance names: deterministic, within brev's rule, and carrying a parseable cluster mark."""

from __future__ import annotations

import re

import pytest

from controller.api import naming
from controller.api.models import BREV_NAME_PATTERN

CLUSTER = "6f1c2a3e-0d4b-4c1e-9a9e-2b7f5c8d1e00"  # a kube-system uid
OTHER = "0a9b8c7d-1111-2222-3333-444455556666"
UID = "1d7f4a52-1b9e-4f3a-9c55-1e2f3a4b5c6d"


def test_the_name_leads_with_the_owner_mark_and_ends_with_the_uid_digest() -> None:
    name = naming.instance_name("ml-team", "resnet-train", UID, cluster_id=CLUSTER)
    mark = naming.owner_mark(CLUSTER, naming.DEFAULT_DEPLOYMENT)
    assert re.fullmatch(r"[0-9a-f]{8}", mark)
    assert name.startswith(f"tbj-{mark}-ml-team-resnet-train-")
    assert len(name.rsplit("-", 1)[1]) == 8


def test_names_are_deterministic_from_cluster_and_uid() -> None:
    first = naming.instance_name("ns", "job", UID, cluster_id=CLUSTER)
    assert naming.instance_name("ns", "job", UID, cluster_id=CLUSTER) == first
    assert naming.instance_name("ns", "job", UID, cluster_id=OTHER) != first
    assert naming.instance_name("ns", "job", UID + "x", cluster_id=CLUSTER) != first


@pytest.mark.parametrize(
    ("namespace", "name"),
    [
        ("n" * 63, "j" * 253),
        ("Team_With.Odd--Chars", "--job..name__"),
        ("a", "b"),
        ("---", "___"),
    ],
)
def test_names_follow_brevs_rule_and_leave_room_for_an_attempt_suffix(namespace: str, name: str) -> None:
    inst = naming.instance_name(namespace, name, UID, cluster_id=CLUSTER)
    assert re.fullmatch(BREV_NAME_PATTERN.strip("^$"), inst), inst
    assert len(inst) <= naming.MAX_NAME - 4, inst
    assert naming.owned_by(inst, CLUSTER)


def test_owned_by_tells_ours_from_another_clusters_and_from_unmarked_names() -> None:
    ours = naming.instance_name("ns", "job", UID, cluster_id=CLUSTER)
    theirs = naming.instance_name("ns", "job", UID, cluster_id=OTHER)
    assert naming.owned_by(ours, CLUSTER)
    assert not naming.owned_by(theirs, CLUSTER)
    assert naming.mark_of(theirs) == naming.owner_mark(OTHER, naming.DEFAULT_DEPLOYMENT)
    # An older operator's name (no mark), a person's instance, a reused box: never ours.
    assert not naming.owned_by("tbj-ns-job-1d7f4a52", CLUSTER)
    assert naming.mark_of("tbj-ns-job-1d7f4a52") is None
    assert not naming.owned_by("my-dev-box", CLUSTER)
    assert not naming.owned_by(
        f"xtbj-{naming.owner_mark(CLUSTER, naming.DEFAULT_DEPLOYMENT)}-ns-job-1", CLUSTER
    )


def test_the_mark_survives_a_per_attempt_suffix() -> None:
    base = naming.instance_name("ns", "job", UID, cluster_id=CLUSTER)
    assert naming.owned_by(f"{base}-a2", CLUSTER)


def test_an_empty_cluster_id_is_refused_with_the_setting_to_fix() -> None:
    with pytest.raises(ValueError, match="TAOBREV_CLUSTER_ID"):
        naming.instance_name("ns", "job", UID, cluster_id="")


def test_the_mark_names_the_deployment_not_only_the_cluster() -> None:
    # Two operators of one cluster (one Brev org) must tell their instances apart.
    a = naming.instance_name("ns", "job", UID, cluster_id=CLUSTER, deployment="ops-a/taobrev-operator")
    b = naming.instance_name("ns", "job", UID, cluster_id=CLUSTER, deployment="ops-b/taobrev-operator")
    assert a != b
    assert naming.owned_by(a, CLUSTER, "ops-a/taobrev-operator")
    assert not naming.owned_by(a, CLUSTER, "ops-b/taobrev-operator")
    assert naming.mark_of(a) == naming.owner_mark(CLUSTER, "ops-a/taobrev-operator")
    # Not the mark older versions wrote (cluster only): those names are never proven ours.
    assert naming.owner_mark(CLUSTER, naming.DEFAULT_DEPLOYMENT) != naming.legacy_mark(CLUSTER)
    assert not naming.owned_by(f"tbj-{naming.legacy_mark(CLUSTER)}-ns-job-1d7f4a52", CLUSTER)
    assert len(a) <= naming.MAX_NAME - 4


def test_a_name_tells_which_namespaces_it_may_have_been_made_for() -> None:
    name = naming.instance_name("team-b", "train", UID, cluster_id=CLUSTER)
    assert naming.made_for_namespaces(name, ["team-a", "team-b"])
    assert not naming.made_for_namespaces(name, ["team-a"])
    assert not naming.made_for_namespaces(name, [])
    assert not naming.made_for_namespaces("alice-box", ["team-b"])
    long = naming.instance_name("n" * 63, "j", UID, cluster_id=CLUSTER)
    assert naming.made_for_namespaces(long, ["n" * 63])
    assert naming.made_for_namespaces(f"{name}-a3", ["team-b"])  # a later attempt's name
