"""The simulator's `instance_durations` knob (SIM-CONTRACT.md section 8): durations chosen per
instance at `brev create`, read by the lifecycle (`brev ls`, ssh) and by the instance's own
`docker pull`. Runs the simulator's executables; no sleeps (globals are far beyond HANG_GUARD)."""

from __future__ import annotations

import pytest

from tests.brevsim.harness import BrevSim
from tests.integration.test_sim_contract import TAO, brev, docker_login, ls_json, remote

pytestmark = pytest.mark.integration

HOURS = 100_000.0  # nominal s: x the fixture's speed 0.01 = 1,000 s, far past any guard


def test_a_matching_instance_gets_its_own_durations_at_create(brev_sim: BrevSim) -> None:
    brev_sim.login_api_key()
    brev_sim.set_faults(
        deploy_s=HOURS,
        ssh_delay_s=HOURS,
        build_s=HOURS,
        pull_seconds=HOURS,
        instance_durations={"quick": {"deploy_s": 0, "ssh_delay_s": 0, "build_s": 0, "pull_seconds": 0}},
    )
    assert brev(brev_sim, "create", "job-quick-1", "-t", "g6e.xlarge", "-d").returncode == 0
    assert brev(brev_sim, "create", "job-slow-1", "-t", "g6e.xlarge", "-d").returncode == 0
    status = {w["name"]: w["status"] for w in ls_json(brev_sim)}
    assert status == {"job-quick-1": "RUNNING", "job-slow-1": "DEPLOYING"}
    assert brev(brev_sim, "refresh").returncode == 0
    docker_login(brev_sim, "job-quick-1")
    # the global pull would last 1,000 s (and hit the hang guard); this instance's is 0
    pull = remote(brev_sim, "job-quick-1", f"docker pull {TAO}")
    assert pull.returncode == 0, pull.stderr
    assert f"Status: Downloaded newer image for {TAO}" in pull.stdout


def test_durations_are_fixed_at_create(brev_sim: BrevSim) -> None:
    brev_sim.login_api_key()
    brev_sim.set_faults(deploy_s=HOURS, instance_durations={"early": {"deploy_s": 0}})
    assert brev(brev_sim, "create", "early", "-t", "g6e.xlarge", "-d").returncode == 0
    brev_sim.set_faults(instance_durations={})
    assert [w["status"] for w in ls_json(brev_sim)] == ["RUNNING"]


@pytest.mark.parametrize(
    ("value", "message"),
    [
        ({"x": {"epoch_seconds": 1}}, "not a per-instance duration"),
        ({"x": {"deploy_s": -1}}, "must be nominal seconds >= 0"),
        ({"x": {}}, "non-empty mapping"),
        (["x"], "must be a mapping"),
    ],
)
def test_a_malformed_value_is_refused_when_set(brev_sim: BrevSim, value: object, message: str) -> None:
    with pytest.raises(ValueError, match=message):
        brev_sim.set_faults(instance_durations=value)
