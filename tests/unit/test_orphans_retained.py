"""A job that keeps its instance (onCompletion: Retain) records it for the orphan sweeper BEFORE
its status says finished: while the record cannot be written, the job does not finish (and so its
finalizer is never released with the instance unrecorded)."""

from __future__ import annotations

import asyncio
from datetime import timedelta

import pytest

from controller.api.errors import KubeUnavailable, SpecError
from controller.api.spec_parse import parse_spec
from controller.api.timestamps import parse_time
from controller.fleet.retained import RetainedStore
from controller.fleet.retained_record import CONFIG_MAP, RetainedRecord
from controller.lifecycle.machine import decide
from controller.reconciler import Reconciler
from tests.fakes.harness import NAME, NAMESPACE, Harness, job_spec
from tests.status_paths import instance, upload

OPERATOR_NS = "taobrev-system"


def harness(instance: dict[str, object]) -> tuple[Harness, RetainedStore]:
    h = Harness(job_spec(instance=instance))
    store = RetainedStore(h.kube, OPERATOR_NS)
    h.reconciler = Reconciler(
        kube=h.kube,
        directory=h.directory,
        runner=h.runner,
        recorder=h.recorder,
        events=h.events,
        tunables=h.tunables,
        decide=decide,
        listing_max_age=h.listing_max_age,
        clock=h.clock.now,
        retained=store,
    )
    return h, store


def test_a_retained_instance_is_recorded_before_the_job_finishes() -> None:
    h, store = harness({"ephemeral": {"gpuName": "L40S", "retainFor": "12h"}, "onCompletion": "Retain"})
    # The record cannot be written: the job runs, uploads, but must not finish.
    h.kube.config_map_fails = KubeUnavailable("reading ConfigMap taobrev-system/taobrev-retained: 503")
    asyncio.run(h.run(seconds=3600))
    assert upload(h.status).get("uploadedAt")
    assert not h.finished
    assert (OPERATOR_NS, CONFIG_MAP) not in h.kube.config_maps

    h.kube.config_map_fails = None
    asyncio.run(h.run(seconds=600))
    assert h.finished
    records = asyncio.run(store.read())
    name = str(h.instance_name)
    assert list(records) == [name]
    rec = records[name]
    assert rec.instance_id == instance(h.status)["id"]
    assert rec.job == f"{NAMESPACE}/{NAME}"
    finished = parse_time(h.status["finishedAt"])
    assert finished is not None
    assert rec.until == finished + timedelta(hours=12)  # retainFor counts from the finish
    assert h.live_instances()  # kept on Brev


def test_a_job_that_deletes_its_instance_leaves_no_record() -> None:
    h, store = harness({"ephemeral": {"gpuName": "L40S"}})
    asyncio.run(h.run(seconds=7200))
    assert h.finished
    assert asyncio.run(store.read()) == {}


def test_records_of_two_jobs_coexist() -> None:
    h, store = harness({"ephemeral": {"gpuName": "L40S"}, "onCompletion": "Retain"})
    asyncio.run(store.record(RetainedRecord("tbj-other", "i-9", "ns/other", None)))
    asyncio.run(h.run(seconds=7200))
    assert set(asyncio.run(store.read())) == {"tbj-other", str(h.instance_name)}


@pytest.mark.parametrize(
    ("ephemeral", "on_completion", "says"),
    [
        ({"retainFor": "12h"}, None, "only meaningful with onCompletion: Retain"),
        ({"retainFor": "12h"}, "Delete", "only meaningful with onCompletion: Retain"),
        ({"retainFor": "0"}, "Retain", "give 1 s .. 366d"),
        ({"retainFor": "400d"}, "Retain", "give 1 s .. 366d"),
        ({"retainFor": "12 hours"}, "Retain", "spec.instance.ephemeral.retainFor"),
    ],
)
def test_a_bad_retain_for_is_refused_naming_the_field_and_the_fix(
    ephemeral: dict[str, str], on_completion: str | None, says: str
) -> None:
    instance: dict[str, object] = {"ephemeral": {"gpuName": "L40S", **ephemeral}}
    if on_completion:
        instance["onCompletion"] = on_completion
    with pytest.raises(SpecError, match="retainFor") as err:
        parse_spec(job_spec(instance=instance))
    assert says in str(err.value)


@pytest.mark.parametrize(("text", "seconds"), [("90", 90), ("90s", 90), ("12h", 43200), ("1d12h30m", 131400)])
def test_retain_for_accepts_seconds_and_units(text: str, seconds: int) -> None:
    spec = parse_spec(job_spec(instance={"ephemeral": {"retainFor": text}, "onCompletion": "Retain"}))
    assert spec.instance.ephemeral is not None
    assert spec.instance.ephemeral.retain_for_seconds() == seconds
