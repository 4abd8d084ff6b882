"""The operator's pace against the simulator's own rate limit (`api_rate_limit`: Brev's API
refuses past N calls a second with the real CLI's `<url> 429 Too Many Requests <body>`): a paced
burst is never refused, a refused read is asked again after the shared cool-down and answers, and
a refused create is not sent twice (what it may have done belongs to the state machine)."""

from __future__ import annotations

import asyncio
from collections.abc import Iterator
from pathlib import Path

import pytest

from controller.api.errors import BrevTransientError, NotLeading
from controller.brev.cli import BrevCLI, BrevCLISettings
from controller.brev.client import BrevCredentials, CreateRequest
from controller.brev.pace import BrevPace, PacePolicy
from controller.versions import load_versions
from tests.brevsim.harness import BrevSim

pytestmark = pytest.mark.integration

API_VERBS = {"ls", "create", "delete", "start", "stop", "refresh", "search"}


@pytest.fixture
def sim(bare_sim: BrevSim) -> BrevSim:
    bare_sim.set_speed(1.0)  # the limit's window is one nominal second: real seconds here
    return bare_sim


@pytest.fixture
def clients(sim: BrevSim, tmp_path: Path) -> Iterator[list[BrevCLI]]:
    made: list[BrevCLI] = []
    yield made
    for client in made:
        client.close()


def client(sim: BrevSim, tmp_path: Path, made: list[BrevCLI], policy: PacePolicy) -> BrevCLI:
    cli = BrevCLI(
        BrevCLISettings(
            home=sim.home,
            expected_version=load_versions().brev.cli_version,
            sa_token_path=tmp_path / "no-service-account-token",
            pace=policy,
        ),
        BrevCredentials(api_key=BrevSim.API_KEY, org_id=BrevSim.ORG_ID),
        env=sim.env(),
    )
    made.append(cli)
    return cli


def api_call_times(sim: BrevSim) -> list[float]:
    return sorted(c.ts for c in sim.calls() if c.program == "brev" and c.argv[:1] and c.argv[0] in API_VERBS)


def test_a_paced_burst_stays_inside_brev_s_limit_and_is_never_refused(
    sim: BrevSim, tmp_path: Path, clients: list[BrevCLI]
) -> None:
    # At most burst + rate x W calls in any window W: 1 + 2 = 3 a second, under the limit of 4
    # with room for the processes' start-up jitter.
    cli = client(sim, tmp_path, clients, PacePolicy(rate=2.0, burst=1))
    asyncio.run(cli.ensure_login())
    sim.set_faults(api_rate_limit=4)
    before = len(api_call_times(sim))

    async def burst() -> None:
        await asyncio.gather(*(cli.list_instances() for _ in range(12)))

    asyncio.run(burst())
    assert cli.pace.throttles == 0
    times = api_call_times(sim)[before:]
    assert len(times) == 12
    # The simulator's own view: no one-second window saw more than the limit.
    assert max(sum(1 for u in times if t <= u < t + 1.0) for t in times) <= 4


def test_a_refused_read_waits_the_cool_down_and_is_asked_again(
    sim: BrevSim, tmp_path: Path, clients: list[BrevCLI]
) -> None:
    cli = client(sim, tmp_path, clients, PacePolicy(rate=100.0, burst=100))  # faster than Brev takes
    asyncio.run(cli.ensure_login())
    sim.set_faults(api_rate_limit=1)

    async def two() -> None:
        await cli.list_instances()
        await cli.list_instances()  # refused at once: the window holds the first

    asyncio.run(two())
    assert cli.pace.throttles >= 1
    times = api_call_times(sim)[-3:]
    assert times[-1] - times[-2] >= 0.5, "the retry came before the cool-down (0.5 s at least)"


def test_a_refused_create_is_not_sent_again(sim: BrevSim, tmp_path: Path, clients: list[BrevCLI]) -> None:
    cli = client(sim, tmp_path, clients, PacePolicy(rate=0.0, burst=1))  # no pace: the 429 is certain
    asyncio.run(cli.ensure_login())
    sim.set_faults(api_rate_limit=1)

    async def ls_then_create() -> None:
        await cli.list_instances()
        await cli.create_instance(
            CreateRequest(name="paced-create", types=("n1-highmem-4:nvidia-tesla-t4:1",))
        )

    with pytest.raises(BrevTransientError) as exc:
        asyncio.run(ls_then_create())
    assert "429 Too Many Requests" in (exc.value.cli_message or "")
    creates = [
        c for c in sim.calls() if c.program == "brev" and c.argv[:1] == ["create"] and "--help" not in c.argv
    ]
    assert len(creates) == 1
    assert cli.pace.throttles == 1


def test_a_change_that_waited_for_its_pace_is_not_sent_once_the_term_ended(
    sim: BrevSim, tmp_path: Path, clients: list[BrevCLI]
) -> None:
    """The fence (the elector's is_leading) is asked at the fork (spawn.py), not before the
    pace's wait: a deposed leader's create queued behind a cool-down must never reach Brev."""
    leading = True

    async def term_ends_meanwhile(seconds: float) -> None:
        nonlocal leading
        leading = False  # the Lease is lost while the create waits for its turn
        await asyncio.sleep(seconds)

    cli = client(sim, tmp_path, clients, PacePolicy(rate=1.0, burst=1))
    cli.pace = BrevPace(PacePolicy(rate=1.0, burst=1), sleep=term_ends_meanwhile)
    cli.fence = lambda: leading
    asyncio.run(cli.ensure_login())

    async def ls_then_create() -> None:
        await cli.list_instances()  # takes the one token: the create waits for the next
        request = CreateRequest(name="fenced-create", types=("n1-highmem-4:nvidia-tesla-t4:1",))
        await cli.create_instance(request)

    with pytest.raises(NotLeading):
        asyncio.run(ls_then_create())
    assert not leading, "the create never waited for its slot: the test shows nothing"
    creates = [
        c for c in sim.calls() if c.program == "brev" and c.argv[:1] == ["create"] and "--help" not in c.argv
    ]
    assert creates == []
