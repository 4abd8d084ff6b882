"""`brev create --type a,b` against the simulator's executables: type a skipped for capacity (the
CLI's own check, nothing sent), then type b's request reaches Brev, which creates the instance
and loses the answer (502). The client must report an ambiguous failure, never
InsufficientCapacity: the instance exists (issue 25, scenario 7)."""

from __future__ import annotations

import asyncio
from pathlib import Path

import pytest

from controller.api.errors import BrevTransientError
from controller.brev.cli import BrevCLI, BrevCLISettings
from controller.brev.client import BrevCredentials, CreateRequest
from controller.versions import load_versions
from tests.brevsim.harness import BrevSim

pytestmark = pytest.mark.integration


def test_a_lost_reply_after_a_capacity_skip_is_no_refusal(brev_sim: BrevSim, tmp_path: Path) -> None:
    client = BrevCLI(
        BrevCLISettings(
            home=brev_sim.home,
            expected_version=load_versions().brev.cli_version,
            sa_token_path=tmp_path / "no-service-account-token",
        ),
        BrevCredentials(api_key=BrevSim.API_KEY, org_id=BrevSim.ORG_ID),
        env=brev_sim.env(),
    )
    try:
        brev_sim.set_faults(capacity=["g6e.xlarge"], create_reply_lost="upstream request timeout")
        request = CreateRequest(name="tbj-lost", types=("g6e.xlarge", "g5.xlarge"))
        with pytest.raises(BrevTransientError) as info:
            asyncio.run(client.create_instance(request))
        assert info.value.reason != "InsufficientCapacity", info.value
        assert "no capacity" in info.value.cli_message  # the skip was there: it did not decide
        assert "502 Bad Gateway" in info.value.cli_message
        brev_sim.clear_faults()
        listed = asyncio.run(client.list_instances())
        assert [i.name for i in listed] == ["tbj-lost"]  # it exists: nothing may assume otherwise
    finally:
        client.close()
