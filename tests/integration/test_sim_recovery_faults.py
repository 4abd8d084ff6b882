"""The simulator side of recovery (issue 12): the TAO stand-in's resume, its in-process form, the
epoch-triggered instance faults, the checkpoint sync/restore faults and the prices `brev search`
reports. Containers run through the simulator's executables (ssh -> docker -> shim) unless a test
is about `tao.run()` in-process.
"""

from __future__ import annotations

import io
import json
import threading
from pathlib import Path
from typing import Any

import pytest

from tests.brevsim import catalog, tao
from tests.brevsim.harness import BrevSim
from tests.brevsim.tao import checkpoint_bytes, checkpoint_text
from tests.devenv.s3 import S3Server
from tests.fixtures.polling import wait_until
from tests.integration.test_sim_contract import (
    AWS,
    brev,
    docker_login,
    ls_json,
    ready_instance,
    remote,
    run_tao,
    write_spec,
)

pytestmark = pytest.mark.integration

CKPT = "/workspace/results/train/model_epoch_{:03d}.pth"


# -- tao.run() in-process -----------------------------------------------------------------------
class InProcess:
    """One TAO container run in a thread of this process, as the in-process ssh simulator runs it."""

    def __init__(self, sim: BrevSim, inst_id: str, job: Path, argv: list[str]) -> None:
        self.out = io.StringIO()
        self.err = io.StringIO()
        self.stop = threading.Event()
        self.code: int | None = None
        mounts = [
            {"Source": str(job / "spec"), "Destination": "/workspace/spec", "RW": False},
            {"Source": str(job / "results"), "Destination": "/workspace/results", "RW": True},
        ]
        rootfs = job / "ctr" / "rootfs"
        rootfs.mkdir(parents=True, exist_ok=True)
        self.args: dict[str, Any] = {
            "state": str(sim.store.root),
            "instance_id": inst_id,
            "mounts": mounts,
            "rootfs": str(rootfs),
            "argv": argv,
        }

    def run(self) -> int:
        return tao.run(
            **self.args, env={"NVIDIA_VISIBLE_DEVICES": "all"}, out=self.out, err=self.err, stop=self.stop
        )

    def start(self) -> threading.Thread:
        def body() -> None:
            self.code = self.run()

        t = threading.Thread(target=body, daemon=True)
        t.start()
        return t


def in_process(
    sim: BrevSim, job: str, *overrides: str, epochs: int = 6, train: dict[str, Any] | None = None
) -> tuple[InProcess, Path]:
    sim.login_api_key()
    inst_id = sim.add_instance("inst")
    home = sim.instance_files("inst")
    spec = {
        "simulation": {"epochs": epochs, "epoch_seconds": 1},
        "train": {"num_epochs": epochs, **(train or {})},
    }
    (home / job / "spec").mkdir(parents=True)
    (home / job / "spec" / "spec.yaml").write_text(json.dumps(spec))
    argv = [
        "visual_changenet",
        "train",
        "-e",
        "/workspace/spec/spec.yaml",
        "results_dir=/workspace/results",
        *overrides,
    ]
    return InProcess(sim, inst_id, home / job, argv), home / job / "results" / "train"


def write_checkpoints(train_dir: Path, upto: int) -> None:
    train_dir.mkdir(parents=True, exist_ok=True)
    for n in range(1, upto + 1):
        (train_dir / f"model_epoch_{n:03d}.pth").write_bytes(checkpoint_bytes(n))


def trained_epochs(text: str) -> list[int]:
    return [
        int(line.split("Epoch ", 1)[1].split("/", 1)[0]) for line in text.splitlines() if "] Epoch " in line
    ]


def test_run_in_process_writes_to_the_given_streams_and_returns_the_exit_code(brev_sim: BrevSim) -> None:
    run, train_dir = in_process(brev_sim, "j", epochs=2)
    assert run.run() == 0
    assert trained_epochs(run.out.getvalue()) == [1, 2]
    assert "train finished successfully" in run.out.getvalue()
    assert checkpoint_text((train_dir / "model_latest.pth").read_bytes()) == "final checkpoint\n"


def test_run_in_process_stops_on_the_event_like_sigterm(brev_sim: BrevSim) -> None:
    run, train_dir = in_process(brev_sim, "j", epochs=100000)
    thread = run.start()
    wait_until(lambda: "Starting visual_changenet train" in run.out.getvalue(), "the run to start")
    run.stop.set()
    thread.join(timeout=30)
    assert not thread.is_alive()
    assert run.code == tao.SIGTERM_EXIT
    assert "Received SIGTERM: stopping" in run.out.getvalue()
    last = json.loads((train_dir / "status.json").read_text().splitlines()[-1])
    assert last["status"] == "FAILURE"


def test_a_finish_request_ends_an_endless_run_successfully_now(brev_sim: BrevSim) -> None:
    """The harness's control (SIGUSR1, in-process `stop.finishing`): the run ends at once with
    exit 0 and its outputs, so a benchmark can time how fast an exit 0 is noticed."""
    run, train_dir = in_process(brev_sim, "j", epochs=100000)
    thread = run.start()
    wait_until(lambda: "Starting visual_changenet train" in run.out.getvalue(), "the run to start")
    run.stop.finishing = True  # type: ignore[attr-defined]
    run.stop.set()
    thread.join(timeout=30)
    assert not thread.is_alive()
    assert run.code == 0
    assert "train finished successfully" in run.out.getvalue()
    assert checkpoint_text((train_dir / "model_latest.pth").read_bytes()) == "final checkpoint\n"


def test_resume_override_trains_only_the_epochs_after_the_checkpoint(brev_sim: BrevSim) -> None:
    run, train_dir = in_process(
        brev_sim, "j", f"train.resume_training_checkpoint_path={CKPT.format(3)}", epochs=6
    )
    write_checkpoints(train_dir, 3)
    assert run.run() == 0
    out = run.out.getvalue()
    assert f"Resuming training from checkpoint {CKPT.format(3)} (epoch 3)" in out
    assert trained_epochs(out) == [4, 5, 6]
    assert sorted(p.name for p in train_dir.glob("model_epoch_*.pth")) == [
        f"model_epoch_{n:03d}.pth" for n in range(1, 7)
    ]
    assert (train_dir / "model_epoch_003.pth").read_bytes() == checkpoint_bytes(3)  # not rewritten
    statuses = [json.loads(line) for line in (train_dir / "status.json").read_text().splitlines()]
    assert statuses[0]["resumed_from_epoch"] == 3
    # TAO 6 counts epochs from 0 in status.json: the resumed run's epoch lines are 3, 4, 5 of 0..5.
    assert [(s["epoch"], s["max_epoch"]) for s in statuses if "epoch" in s] == [(3, 5), (4, 5), (5, 5)]


def test_resume_key_in_the_spec_train_mapping_is_honoured(brev_sim: BrevSim) -> None:
    run, train_dir = in_process(
        brev_sim, "j", epochs=4, train={"resume_training_checkpoint_path": CKPT.format(2)}
    )
    write_checkpoints(train_dir, 2)
    assert run.run() == 0
    assert trained_epochs(run.out.getvalue()) == [3, 4]


def test_without_the_override_existing_checkpoints_do_not_resume(brev_sim: BrevSim) -> None:
    run, train_dir = in_process(brev_sim, "j", epochs=3)
    write_checkpoints(train_dir, 2)
    assert run.run() == 0
    assert "Resuming" not in run.out.getvalue()
    assert trained_epochs(run.out.getvalue()) == [1, 2, 3]


def test_resume_from_a_missing_checkpoint_fails_like_tao(brev_sim: BrevSim) -> None:
    run, train_dir = in_process(brev_sim, "j", f"train.resume_training_checkpoint_path={CKPT.format(3)}")
    write_checkpoints(train_dir, 2)
    assert run.run() == 1
    assert (
        f"FileNotFoundError: Checkpoint at {CKPT.format(3)} not found. Aborting training."
        in run.err.getvalue()
    )
    assert trained_epochs(run.out.getvalue()) == []
    assert json.loads((train_dir / "status.json").read_text().splitlines()[-1])["status"] == "FAILURE"


@pytest.mark.parametrize(
    ("name", "content"),
    [
        ("model_epoch_003.pth", checkpoint_bytes(2)),  # the name and the content disagree
        ("model_epoch_003.pth", b"\x00garbage"),
        ("model_epoch_003.pth", checkpoint_bytes(3)[:-30]),  # cut short: no central directory
        ("model_epoch_003.pth", b"checkpoint 3\n"),  # the right text, but no zip archive
        ("model_best.pth", checkpoint_bytes(3)),  # no epoch in the name
    ],
)
def test_resume_from_a_corrupt_checkpoint_fails_like_torch(
    brev_sim: BrevSim, name: str, content: bytes
) -> None:
    path = f"/workspace/results/train/{name}"
    run, train_dir = in_process(brev_sim, "j", f"train.resume_training_checkpoint_path={path}")
    train_dir.mkdir(parents=True)
    (train_dir / name).write_bytes(content)
    assert run.run() == 1
    assert "PytorchStreamReader failed reading zip archive" in run.err.getvalue()
    assert trained_epochs(run.out.getvalue()) == []


# -- epoch-triggered instance faults (through docker: the shim, the sandbox, `brev ls`) -----------
def start_training(sim: BrevSim, *, epochs: int, **faults: Any) -> tuple[str, Path]:
    """Train `epochs` epochs in a detached container on `inst`; `faults` may name its id (`{id}`)."""
    inst = ready_instance(sim)
    inst_id = str(sim.instances()[-1]["id"])
    sim.set_faults(
        **{
            k: {(inst_id if t == "{id}" else t): n for t, n in v.items()} if isinstance(v, dict) else v
            for k, v in faults.items()
        }
    )
    docker_login(sim, inst)
    write_spec(sim, inst, "j", epochs=epochs)
    res = remote(sim, inst, run_tao("j"))
    assert res.returncode == 0, res.stderr
    return inst_id, sim.instance_files(inst) / "taobrev" / "j" / "results" / "train"


def container_state(sim: BrevSim, inst_id: str) -> dict[str, Any]:
    ctr = sim.store.instance_dir(inst_id) / "docker" / "containers"
    (cid,) = [p.name for p in ctr.iterdir()]
    state: dict[str, Any] = json.loads((ctr / cid / "state.json").read_text())
    return state


def assert_frozen(sim: BrevSim, inst_id: str) -> None:
    """A lost VM reports nothing: its container record stays `running`, no exit code is ever
    written (an in-flight `docker wait` hangs, as over a dead link) and training does not go on."""
    state = container_state(sim, inst_id)
    assert state["Running"] is True
    assert state["ExitCode"] == 0
    assert Path(f"/proc/{state['Pid']}").exists()


def test_vanish_at_epoch_loses_the_instance_after_that_epoch(brev_sim: BrevSim) -> None:
    inst_id, train_dir = start_training(brev_sim, epochs=6, vanish_at_epoch={"inst": 3})
    wait_until(lambda: ls_json(brev_sim) == [], "the instance to vanish")
    assert sorted(p.name for p in train_dir.glob("model_epoch_*.pth")) == [
        f"model_epoch_{n:03d}.pth" for n in range(1, 4)
    ]
    assert_frozen(brev_sim, inst_id)
    gone = [i for i in brev_sim.instances(include_deleted=True) if i["id"] == inst_id]
    assert gone[0]["status"] == "DELETED"
    assert remote(brev_sim, "inst", "true").returncode == 255


def test_failure_at_epoch_targets_by_id_and_turns_the_instance_failure(brev_sim: BrevSim) -> None:
    brev_sim.login_api_key()
    brev_sim.add_instance("bystander")
    inst_id, train_dir = start_training(brev_sim, epochs=6, failure_at_epoch={"{id}": 2, "bystander": 1})
    wait_until(lambda: {w["name"]: w["status"] for w in ls_json(brev_sim)}["inst"] == "FAILURE", "FAILURE")
    assert {w["name"]: w["status"] for w in ls_json(brev_sim)} == {"inst": "FAILURE", "bystander": "RUNNING"}
    assert_frozen(brev_sim, inst_id)
    assert (train_dir / "model_epoch_002.pth").exists()
    assert not (train_dir / "model_epoch_003.pth").exists()


def test_stop_at_epoch_stops_the_instance_as_if_preempted(brev_sim: BrevSim) -> None:
    inst_id, train_dir = start_training(brev_sim, epochs=6, stop_at_epoch={"inst": 1}, stop_s=1000)
    wait_until(lambda: not container_state(brev_sim, inst_id).get("Running"), "the container to stop")
    # A graceful shutdown: dockerd sends SIGTERM, TAO exits 143 and says it was interrupted.
    assert container_state(brev_sim, inst_id)["ExitCode"] == 143
    last = json.loads((train_dir / "status.json").read_text().splitlines()[-1])
    assert last["status"] == "FAILURE"
    assert [w["status"] for w in ls_json(brev_sim)] == ["STOPPING"]
    brev_sim.advance(1000)
    assert [w["status"] for w in ls_json(brev_sim)] == ["STOPPED"]


def test_an_epoch_fault_for_a_later_epoch_than_trained_never_fires(brev_sim: BrevSim) -> None:
    inst_id, train_dir = start_training(brev_sim, epochs=2, vanish_at_epoch={"inst": 9})
    wait_until(lambda: not container_state(brev_sim, inst_id).get("Running"), "training to end")
    assert container_state(brev_sim, inst_id)["ExitCode"] == 0
    assert [w["status"] for w in ls_json(brev_sim)] == ["RUNNING"]
    assert (train_dir / "model_latest.pth").exists()


# -- checkpoint sync / restore faults (the aws-cli image against loopback S3) ---------------------
def aws_on(sim: BrevSim, s3: S3Server, inst: str, *args: str, job: str = "u") -> Any:
    creds = b"AWS_ACCESS_KEY_ID=AKIATEST\nAWS_SECRET_ACCESS_KEY=very-secret\nAWS_DEFAULT_REGION=us-east-1\n"
    env_file = sim.instance_files(inst) / "s3.env"
    env_file.write_bytes(creds)
    return remote(
        sim,
        inst,
        f"docker run --rm --env-file ~/s3.env -v ~/taobrev/{job}:/job {AWS} --endpoint-url {s3.endpoint_url} "
        + " ".join(args),
    )


def test_checkpoint_sync_fails_transiently_n_times_then_works(brev_sim: BrevSim, s3_server: S3Server) -> None:
    inst = ready_instance(brev_sim)
    s3_server.create_bucket("ckpt-sync-retries")
    write_checkpoints(brev_sim.instance_files(inst) / "taobrev" / "u" / "results" / "train", 2)
    brev_sim.set_faults(checkpoint_sync_fails=2)
    sync = ("s3", "sync", "/job/results", "s3://ckpt-sync-retries/p/checkpoints/")
    other = aws_on(
        brev_sim, s3_server, inst, "s3", "sync", "/job/results", "s3://ckpt-sync-retries/p/results/"
    )
    assert other.returncode == 0, other.stderr  # only checkpoint syncs are hit
    for _ in range(2):
        failed = aws_on(brev_sim, s3_server, inst, *sync)
        assert failed.returncode == 1
        assert "An error occurred (SlowDown) when calling the PutObject operation" in failed.stderr
    ok = aws_on(brev_sim, s3_server, inst, *sync)
    assert ok.returncode == 0, ok.stderr
    keys = sorted(
        o["Key"]
        for o in s3_server.client().list_objects_v2(Bucket="ckpt-sync-retries", Prefix="p/checkpoints/")[
            "Contents"
        ]
    )
    assert keys == ["p/checkpoints/train/model_epoch_001.pth", "p/checkpoints/train/model_epoch_002.pth"]


def test_restore_finds_nothing_copies_nothing(brev_sim: BrevSim, s3_server: S3Server) -> None:
    inst = ready_instance(brev_sim)
    s3_server.create_bucket("ckpt-restore-nothing")
    s3_server.client().put_object(
        Bucket="ckpt-restore-nothing", Key="p/checkpoints/train/model_epoch_001.pth", Body=checkpoint_bytes(1)
    )
    restore = ("s3", "sync", "s3://ckpt-restore-nothing/p/checkpoints/", "/job/results")
    results = brev_sim.instance_files(inst) / "taobrev" / "u" / "results"
    results.mkdir(parents=True)
    brev_sim.set_faults(restore_finds_nothing=[inst])
    empty = aws_on(brev_sim, s3_server, inst, *restore)
    assert (empty.returncode, empty.stdout) == (0, "")
    assert list(results.rglob("*.pth")) == []
    brev_sim.set_faults(restore_finds_nothing=False)
    full = aws_on(brev_sim, s3_server, inst, *restore)
    assert full.returncode == 0, full.stderr
    assert (results / "train" / "model_epoch_001.pth").read_bytes() == checkpoint_bytes(1)


# -- prices --------------------------------------------------------------------------------------
def test_search_json_reports_price_per_hour_as_the_real_cli_does(brev_sim: BrevSim) -> None:
    res = brev(brev_sim, "search", "--json")
    assert res.returncode == 0, res.stderr
    rows = json.loads(res.stdout)
    by_type = {r["type"]: r for r in rows}
    assert by_type["g6e.xlarge"]["price_per_hour"] == 1.86
    assert list(by_type["g6e.xlarge"])[-1] == "price_per_hour"  # the last field, as in the Go struct
    for row in rows:
        assert isinstance(row["price_per_hour"], float | int)
        assert row["price_per_hour"] == catalog.BY_TYPE[row["type"]].price_per_hour
    cpu = json.loads(brev(brev_sim, "search", "cpu", "--json").stdout)
    assert all(isinstance(r["price_per_hour"], float | int) for r in cpu)


def test_an_epoch_fault_can_wait_for_the_checkpoint_sync_of_that_epoch(
    brev_sim: BrevSim, s3_server: S3Server
) -> None:
    """With `epoch_fault_sync_wait_s`, the loss comes after the next checkpoint sync, so that
    sync holds epoch N's checkpoint (the e2e 'lost at epoch 3, resume at 4' needs exactly this)."""
    s3_server.create_bucket("ckpt-epoch-fault")
    inst_id, train_dir = start_training(
        brev_sim, epochs=6, vanish_at_epoch={"inst": 2}, epoch_fault_sync_wait_s=100000
    )
    wait_until((train_dir / "model_epoch_002.pth").exists, "epoch 2's checkpoint")
    assert [w["status"] for w in ls_json(brev_sim)] == ["RUNNING"]  # held, not lost yet
    sync = aws_on(
        brev_sim,
        s3_server,
        "inst",
        "s3",
        "sync",
        "/job/results",
        "s3://ckpt-epoch-fault/p/checkpoints/",
        job="j",
    )
    # The instance vanishes as soon as the sync's container has ended: as with a real VM, that
    # may cut the ssh connection before it delivered the exit status (255; seen under a
    # whole-suite load). The sync itself is judged by what reached S3, below.
    assert sync.returncode in (0, 255), sync.stderr
    wait_until(lambda: ls_json(brev_sim) == [], "the instance to vanish after the sync")
    keys = {o["Key"] for o in s3_server.client().list_objects_v2(Bucket="ckpt-epoch-fault")["Contents"]}
    assert "p/checkpoints/train/model_epoch_002.pth" in keys
    assert not (train_dir / "model_epoch_003.pth").exists()
    assert_frozen(brev_sim, inst_id)
