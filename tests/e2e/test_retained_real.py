"""Scenario 12 (issue 25) against the real API server, which enforces the 1 MiB ConfigMap limit
the unit tier's fake copies: records worth more than one ConfigMap are all written and read back
(the single-ConfigMap store failed here with 422 "Too long: must have at most 1048576 bytes")."""

from __future__ import annotations

import asyncio

import pytest

from controller.api.timestamps import parse_time
from controller.fleet.retained import RetainedStore
from controller.fleet.retained_record import RetainedRecord
from controller.kube.access import Connection, KubeAccess, api_client
from tests.devenv.controlplane import ControlPlane

pytestmark = pytest.mark.e2e

ONE_MIB = 1024 * 1024


def test_more_than_one_mib_of_records_is_written_and_read_back(
    control_plane: ControlPlane, namespace: str
) -> None:
    conn = Connection(
        server=control_plane.server,
        ca_path=str(control_plane.ca_file),
        token_path=None,
        token=control_plane.admin_token,
    )
    store = RetainedStore(KubeAccess(api_client(conn), request_timeout=30), namespace)
    until = parse_time("2027-01-01T00:00:00Z")
    # Fat records (a 2 KB job field) reach 1 MiB in ~550 writes rather than ~2,500.
    records = [RetainedRecord(f"tbj-{i:05d}", f"i-{i}", "j" * 2048, until) for i in range(600)]
    assert sum(len(r.name) + len(r.value()) for r in records) > ONE_MIB

    async def scenario() -> dict[str, RetainedRecord]:
        for rec in records:
            await store.record(rec)
        return await store.read()

    assert asyncio.run(scenario()) == {r.name: r for r in records}
