"""The simulated Brev backend (moto's models.py to cli.py's responses.py): instance records, who
owns them, which lifecycle actions the server accepts, and what a given login may see and touch.
No argv and no output formats here; errors carry the CLI's text so the front end can print them.

Whose instances a login sees (the real `pkg/cmd/ls/ls.go`, `pkg/cmd/util/util.go`,
`pkg/store/workspace.go`):
- API-key login: `ls` (with or without `--all`) lists every instance of the org; exec/delete/
  stop/start resolve names among all of them.
- token (user) login: `ls` lists only the user's own instances unless `--all`; exec/delete/start
  resolve names and ids ONLY among the user's own instances (a teammate's answers
  `instance with id/name X not found`, even with `--all`); stop alone falls back to the org.
- several matches: FAILURE ones are dropped first; several left -> `multiple instances found
  with id/name X`; only failed ones -> `instance with id/name X is a failed workspace`.
"""

from __future__ import annotations

import random
import string
import time
from typing import Any

from tests.brevsim import catalog, container, launch
from tests.brevsim import faults as knobs
from tests.brevsim.auth import Session
from tests.brevsim.goerr import CLIError
from tests.brevsim.model import NOMINAL, Observation, can, instance_delays, observe
from tests.brevsim.store import Store

Row = tuple[dict[str, Any], Observation]


def new_id() -> str:
    return "".join(random.choices(string.ascii_lowercase + string.digits, k=9))  # noqa: S311 - ids, not secrets


def new_record(
    db: dict[str, Any],
    *,
    name: str,
    org_id: str,
    user_id: str,
    instance_type: str,
    now: float,
    lifecycle: str = "create",
    phase_at: float | None = None,
    disk_gb: float = 0.0,
) -> dict[str, Any]:
    """A fresh instance record, added to `db` (inside a Store.tx)."""
    db["seq"] = int(db.get("seq", 0)) + 1
    seq = int(db["seq"])
    inst_id = new_id()
    while inst_id in db["instances"]:  # ids never repeat
        inst_id = new_id()
    it = catalog.BY_TYPE.get(instance_type)
    inst: dict[str, Any] = {
        "id": inst_id,
        "name": name,
        "org_id": org_id,
        "user_id": user_id,
        "instance_type": instance_type,
        "gpu": it.gpu_name if it else "",
        "stoppable": it.stoppable if it else True,
        "disk_gb": disk_gb or (it.disk_min_gb if it else 500),
        "ip": f"127.77.{seq // 250}.{seq % 250 + 1}",
        "created_at": now,
        "lifecycle": lifecycle,
        "phase_at": now if phase_at is None else phase_at,
        "status_message": "",
        "disappear_at": None,
    }
    db["instances"][inst_id] = inst
    return inst


class Backend:
    """The server side of one simulator state directory, as seen by one CLI invocation."""

    def __init__(self, store: Store) -> None:
        self.store = store

    # -- observation ---------------------------------------------------------------------------
    def delays(self) -> dict[str, float]:
        return {k: self.store.delay(k, v) for k, v in NOMINAL.items()}

    def observe(self, inst: dict[str, Any]) -> Observation:
        obs = observe(inst, self.store.now(), self.delays())
        if obs.ssh_ready and knobs.targets(self.store.fault("exec_never_ready"), inst["name"], inst["id"]):
            return Observation(
                obs.status, obs.build_status, obs.health_status, False, False, obs.running_since
            )
        return obs

    def current(self, inst_id: str) -> Observation | None:
        """The instance's status now, or None once it is gone (for polling loops)."""
        cur = self.store.read()["instances"].get(inst_id)
        if cur is None:
            return None
        obs = self.observe(cur)
        return None if obs.gone else obs

    def org_rows(self, org_id: str) -> list[Row]:
        """Every existing instance of the org, oldest first."""
        rows = []
        for inst in sorted(self.store.read()["instances"].values(), key=lambda i: float(i["created_at"])):
            if inst.get("org_id") != org_id:
                continue
            obs = self.observe(inst)
            if not obs.gone:
                rows.append((inst, obs))
        return rows

    def owned_rows(self, sess: Session) -> list[Row]:
        """What this login owns: the whole org for an API key, the user's own for a token."""
        rows = self.org_rows(sess.org_id)
        if sess.api_key:
            return rows
        return [(i, o) for i, o in rows if i.get("user_id") == sess.user_id]

    def listing(self, sess: Session, *, show_all: bool) -> list[Row]:
        """`brev ls`: owned instances (the org with `--all`), minus what `ls_omit` hides this time."""
        rows = self.org_rows(sess.org_id) if show_all else self.owned_rows(sess)
        keys = {str(i["name"]) for i, _ in rows} | {str(i["id"]) for i, _ in rows}
        hidden = self.store.consume_omissions(keys) if self.store.fault("ls_omit") else set()
        return [(i, o) for i, o in rows if i["name"] not in hidden and i["id"] not in hidden]

    def resolve(self, sess: Session, name_or_id: str, *, whole_org: bool = False) -> Row:
        """GetUserWorkspaceByNameOrIDErr (own instances) / GetAnyWorkspaceByIDOrNameInOrgErr."""
        rows = self.org_rows(sess.org_id) if whole_org else self.owned_rows(sess)
        matches = [(i, o) for i, o in rows if name_or_id in (i["name"], i["id"])]
        if not matches:
            raise CLIError(f"instance with id/name {name_or_id} not found")
        if len(matches) > 1:
            live = [(i, o) for i, o in matches if o.status != "FAILURE"]
            if not live:
                raise CLIError(f"instance with id/name {name_or_id} is a failed workspace")
            if len(live) > 1:
                raise CLIError(f"multiple instances found with id/name {name_or_id}")
            matches = live
        return matches[0]

    # -- lifecycle actions (the server's side of create/delete/stop/start) --------------------------
    def create(self, sess: Session, name: str, itype: str, disk: float) -> dict[str, Any]:
        store = self.store
        slow = store.delay("create_s", NOMINAL["create_s"])
        if slow > 0:  # slow at Brev: nothing exists (or is listed) until the request is served
            time.sleep(slow)
        fails = store.fault("create_fails")
        if fails:
            raise CLIError(f"500 Internal Server Error: {fails}")
        failure = store.fault("failure_status")
        now = store.now()
        with store.tx() as db:
            for other in db["instances"].values():
                if (
                    other["name"] == name
                    and other.get("org_id") == sess.org_id
                    and not self.observe(other).gone
                ):
                    raise CLIError(f'400 Bad Request: duplicate workspace name "{name}" in organization')
            inst = new_record(
                db,
                name=name,
                org_id=sess.org_id,
                user_id=sess.user_id,
                instance_type=itype,
                now=now,
                lifecycle="create_failed" if failure else "create",
                disk_gb=disk,
            )
            if failure and failure is not True:
                inst["status_message"] = str(failure)
            own = knobs.durations_for(store.fault("instance_durations"), name, str(inst["id"]))
            if own:  # real seconds, like every delay the model reads
                inst["delays"] = {k: v * store.speed for k, v in own.items()}
            vanish = store.fault("disappear_after_s")
            if vanish is not None:
                deploy = instance_delays(inst, {"deploy_s": store.delay("deploy_s", NOMINAL["deploy_s"])})
                inst["disappear_at"] = now + deploy["deploy_s"] + float(vanish) * store.speed
            db["created_count"][name] = int(db["created_count"].get(name, 0)) + 1
        launch.make_sandbox(store, inst)
        lost = store.fault("create_reply_lost")
        if lost:  # a gateway timed out while the backend went on: made, but the CLI hears 502
            raise CLIError(f"502 Bad Gateway: {lost}")
        return inst

    def delete(self, inst: dict[str, Any], obs: Observation) -> None:
        """DELETE api/workspaces/{id}: accepted at once; DELETING (after `delete_lag_s` of still
        showing the old status) until gone. Its containers die now."""
        now = self.store.now()
        lag = self.store.delay("delete_lag_s", NOMINAL["delete_lag_s"])
        with self.store.tx() as db:
            cur = db["instances"].get(inst["id"])
            if cur is not None and cur["lifecycle"] != "delete" and can("delete", obs.status):
                cur["lifecycle"] = "delete"
                cur["phase_at"] = now + lag  # DELETING starts after the lag
                if lag > 0:
                    cur["pre_delete"] = {
                        "status": obs.status,
                        "build_status": obs.build_status,
                        "health_status": obs.health_status,
                    }
        # Containers watch this marker and die with their instance.
        d = self.store.instance_dir(inst["id"])
        if d.is_dir():
            (d / "gone").touch()

    def stop(self, inst: dict[str, Any]) -> None:
        self._set_lifecycle(inst["id"], "stop")
        # A stopped VM loses its processes.
        container.kill_all(self.store, inst["id"])

    def start(self, inst: dict[str, Any]) -> None:
        self._set_lifecycle(inst["id"], "start")

    def _set_lifecycle(self, inst_id: str, lifecycle: str) -> None:
        now = self.store.now()
        with self.store.tx() as db:
            cur = db["instances"][inst_id]
            if cur["lifecycle"] == "delete":
                # still listed (delete_lag_s) but already being deleted: never resurrected
                raise CLIError(f"400 Bad Request: workspace {inst_id} is being deleted")
            cur["lifecycle"] = lifecycle
            cur["phase_at"] = now

    def strike(self, inst_id: str, how: str, *, spare_container: str | None = None) -> None:
        """An epoch-triggered fault (faults.py `*_at_epoch`): the provider loses the instance now.
        `vanish`: gone without DELETING (as `disappear_after_s`); `failure`: FAILURE; `stop`:
        STOPPING then STOPPED (preempted). Its other containers die with it (exit 137); the caller's
        own container (`spare_container`) decides what it reports."""
        now = self.store.now()
        with self.store.tx() as db:
            cur = db["instances"].get(inst_id)
            if cur is None or cur["lifecycle"] == "delete":
                return
            if how == "vanish":
                cur["disappear_at"] = now
            elif how == "failure":
                cur["lifecycle"] = "create_failed"  # past its DEPLOYING segment: FAILURE now
                cur["phase_at"] = now - self.store.delay("deploy_s", NOMINAL["deploy_s"])
                cur["status_message"] = "instance failed (simulated hardware failure)"
            elif how == "stop":
                cur["lifecycle"] = "stop"
                cur["phase_at"] = now
            else:
                raise ValueError(f"unknown strike {how!r}: vanish, failure or stop")
        container.kill_all(self.store, inst_id, spare=spare_container)
