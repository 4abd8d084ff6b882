"""The simulated `brev` program (v0.6.327), the front end: commands, flags, output formats and the
CLI's own quirks (SIM-CONTRACT.md). What the server does (records, ownership, lifecycle actions,
name resolution) lives in backend.py, as moto keeps responses apart from models.

Exit codes follow main.go: 1 for any error, 0 otherwise, 2 for a Go panic (closed fd 0).
"""

from __future__ import annotations

import contextlib
import json
import os
import stat
import string
import subprocess
import sys
import time
from collections.abc import Callable
from pathlib import Path
from typing import Any

from tests.brevsim import catalog, cobra, control, goerr
from tests.brevsim.auth import Auth, Session, jwt_valid_client_side
from tests.brevsim.backend import Backend, Row
from tests.brevsim.cobra import Flag
from tests.brevsim.goerr import CLIError, trace
from tests.brevsim.model import NOMINAL, Observation, can
from tests.brevsim.record import record_call, record_stdin
from tests.brevsim.sshconfig import write_brev_ssh_files
from tests.brevsim.store import Store, write_json

CONSOLE_URL = "https://brev.nvidia.com"
NAME_RE_CHARS = set(string.ascii_letters + string.digits + "._-")


class Panic(Exception):
    """A Go runtime panic (exit 2)."""


class Exit(Exception):
    def __init__(self, code: int) -> None:
        super().__init__(code)
        self.code = code


# -- terminal / pipes ---------------------------------------------------------------------------
def out(text: str) -> None:
    sys.stdout.write(text)
    sys.stdout.flush()


def err(text: str) -> None:
    sys.stderr.write(text)
    sys.stderr.flush()


def stdout_piped() -> bool:
    try:
        return not stat.S_ISCHR(os.fstat(1).st_mode)
    except OSError:
        return True


def stdin_piped() -> bool:
    """util.IsStdinPiped: `os.Stdin.Stat()` then `.Mode()` without checking the error."""
    try:
        mode = os.fstat(0).st_mode
    except OSError:
        raise Panic from None
    return not stat.S_ISCHR(mode)


class Ctx:
    def __init__(self, store: Store, bin_dir: Path) -> None:
        self.store = store
        self.bin_dir = bin_dir
        self.home = Path(os.environ.get("HOME") or "/nonexistent")
        self.auth = Auth(store, self.home)
        self.backend = Backend(store)
        self.call_id = ""
        self.stdin_bytes = 0

    def read_stdin_lines(self) -> list[str]:
        data = sys.stdin.buffer.read()
        self.stdin_bytes += len(data)
        return [ln.strip() for ln in data.decode(errors="replace").splitlines() if ln.strip()]

    def names_from_args_and_stdin(self, args: list[str]) -> list[str]:
        names = list(args)
        if stdin_piped():
            names += self.read_stdin_lines()
        return names

    def session(self) -> Session:
        return self.auth.session()

    def observe(self, inst: dict[str, Any]) -> Observation:
        return self.backend.observe(inst)

    def lookup(self, name_or_id: str, *, whole_org: bool = False) -> Row:
        """Name/id resolution for the current login (backend.Backend.resolve)."""
        return self.backend.resolve(self.session(), name_or_id, whole_org=whole_org)

    def wait_running(self, inst_id: str, deadline: float | None) -> bool:
        """Poll like the CLI (create_poll_s) until RUNNING; False at the deadline or once gone."""
        poll = self.store.delay("create_poll_s", NOMINAL["create_poll_s"])
        while True:
            obs = self.backend.current(inst_id)
            if obs is not None and obs.status == "RUNNING":
                return True
            if obs is None or (deadline is not None and time.time() > deadline):
                return False
            time.sleep(poll)

    def child_env(self) -> dict[str, str]:
        # Keep the simulator's own bin first so its children never reach a real ssh/ssh-agent.
        env = control.marked_env(self.store.root)  # the reaper finds agents and ssh masters by it
        path = env.get("PATH", "")
        if not path.startswith(str(self.bin_dir) + ":"):
            env["PATH"] = f"{self.bin_dir}:{path}"
        return env


# -- commands -----------------------------------------------------------------------------------
LS_FLAGS = (
    Flag("json", kind="bool", usage="output as JSON"),
    Flag("all", kind="bool", usage="show all instances in the org"),
    Flag("org", "o", "string", usage="organization (will override active org)"),
)


def cmd_ls(ctx: Ctx, p: cobra.Parsed) -> None:
    sess = ctx.session()
    if p["org"]:
        if sess.api_key:
            raise CLIError("api key auth cannot list organizations")
        if p["org"] != sess.org_name:
            raise CLIError(f"no org found with name {p['org']}")
    if len(p.args) > 1:
        raise CLIError("too many args provided")
    what = p.args[0] if p.args else "instances"
    if what in ("orgs", "org", "organizations"):
        _ls_orgs(sess, as_json=bool(p["json"]))
    elif what in ("nodes", "hosts"):
        out("[]\n" if p["json"] else "No external nodes in this org.\n")
    elif what in ("instances", "workspaces", "instance", "workspace"):
        infos = [_workspace_info(i, o) for i, o in ctx.backend.listing(sess, show_all=bool(p["all"]))]
        if p["json"]:
            # a nil Go slice marshals as null
            out(json.dumps({"workspaces": infos or None}, indent=2, ensure_ascii=False) + "\n")
        else:
            _ls_table(sess, infos, show_all=bool(p["all"]))
    # an unknown positional prints nothing and exits 0


def _ls_orgs(sess: Session, *, as_json: bool) -> None:
    if sess.api_key:
        raise CLIError("api key auth cannot list organizations")
    if as_json:
        out(json.dumps([{"name": sess.org_name, "id": sess.org_id, "is_active": True}], indent=2) + "\n")
    else:
        out(f"Your organizations:\nNAME      ID\n* {sess.org_name}  {sess.org_id}\n")


def _workspace_info(inst: dict[str, Any], obs: Observation) -> dict[str, str]:
    """pkg/entity WorkspaceInfo: exactly these keys (no owner, org or timestamp)."""
    it = catalog.BY_TYPE.get(str(inst["instance_type"]))
    gpu = it.gpu_name if it and it.gpu_name else "-"
    return {
        "name": str(inst["name"]),
        "id": str(inst["id"]),
        "status": obs.display_status,
        "build_status": obs.build_status,
        "shell_status": obs.shell_status,
        "health_status": obs.health_status,
        "instance_type": str(inst["instance_type"]),
        "instance_kind": "gpu" if gpu != "-" else "cpu",
        "gpu": gpu,
    }


def _ls_table(sess: Session, infos: list[dict[str, str]], *, show_all: bool) -> None:
    org_name = sess.org_name
    if not infos:
        out(f"No instances in org {org_name}\n\nStart a new instance:\n")
        return
    if sess.api_key:
        out(f"Org {org_name} has {len(infos)} instances\n")
    elif show_all:
        out(f"{len(infos)} instances in Org {org_name}\n")
    else:
        out(f"You have {len(infos)} instances in Org {org_name}\n")
    header = ["NAME", "STATUS", "BUILD", "SHELL", "ID", "MACHINE", "GPU"]
    table = [header] + [
        [i["name"], i["status"], i["build_status"], i["shell_status"], i["id"], i["instance_type"], i["gpu"]]
        for i in infos
    ]
    widths = [max(len(r[c]) for r in table) for c in range(len(header))]
    for r in table:
        out(" " + "  ".join(cell.ljust(w) for cell, w in zip(r, widths, strict=True)).rstrip() + "\n")
    out("\n")


SEARCH_FLAGS = (
    Flag("gpu-name", "g", "string", usage="Filter by GPU name (case-insensitive, partial match)"),
    Flag("min-vram", "v", "float", usage="Minimum VRAM per GPU in GB"),
    Flag("min-total-vram", "t", "float", usage="Minimum total VRAM (GPU count * VRAM) in GB"),
    Flag("min-capability", "c", "float", usage="Minimum GPU compute capability (e.g., 8.0 for Ampere)"),
    Flag("wide", "w", "bool", usage="Show additional columns (RAM, ARCH)"),
    Flag("provider", "p", "string", usage="Filter by provider/cloud (case-insensitive, partial match)"),
    Flag("arch", kind="string", usage="Filter by architecture (e.g., x86_64, arm64)"),
    Flag("min-vcpu", kind="int", usage="Minimum number of vCPUs"),
    Flag("min-ram", kind="float", usage="Minimum RAM in GB"),
    Flag("min-disk", kind="float", usage="Minimum disk size in GB"),
    Flag("max-boot-time", kind="int", usage="Maximum boot time in minutes"),
    Flag("stoppable", kind="bool", usage="Only show instances that can be stopped and restarted"),
    Flag("rebootable", kind="bool", usage="Only show instances that can be rebooted"),
    Flag("flex-ports", kind="bool", usage="Only show instances with configurable firewall rules"),
    Flag(
        "sort", "s", "string", "price", usage="Sort by: price, gpu-count, vram, total-vram, vcpu, type, ..."
    ),
    Flag("desc", "d", "bool", usage="Sort in descending order"),
    Flag("json", kind="bool", usage="Output results as JSON"),
)


def _filters_from(p: cobra.Parsed, *, cpu: bool = False) -> catalog.Filters:
    sort = str(p.values.get("sort") or "price")
    if sort.lower() not in catalog.SORT_KEYS:
        raise CLIError(f'invalid sort option "{sort}". Valid options: {", ".join(sorted(catalog.SORT_KEYS))}')
    return catalog.Filters(
        gpu_name=str(p.values.get("gpu-name", "")),
        provider=str(p.values.get("provider", "")),
        arch=str(p.values.get("arch", "")),
        min_vram=float(p.values.get("min-vram", 0)),
        min_total_vram=float(p.values.get("min-total-vram", 0)),
        min_capability=float(p.values.get("min-capability", 0)),
        min_vcpu=int(p.values.get("min-vcpu", 0)),
        min_ram=float(p.values.get("min-ram", 0)),
        min_disk=float(p.values.get("min-disk", 0)),
        max_boot_time=int(p.values.get("max-boot-time", 0)),
        stoppable=bool(p.values.get("stoppable")),
        rebootable=bool(p.values.get("rebootable")),
        flex_ports=bool(p.values.get("flex-ports")),
        sort=sort,
        desc=bool(p.values.get("desc")),
        cpu=cpu,
    )


def _print_search(results: list[catalog.InstanceType], *, as_json: bool, wide: bool) -> None:
    if as_json:
        out(json.dumps([catalog.to_json(t) for t in results], indent=2) + "\n")
        return
    piped = stdout_piped()
    if piped:
        header = ["TYPE", "TARGET_DISK", "PROVIDER", "GPU", "COUNT", "VRAM/GPU", "TOTAL_VRAM", "CAPABILITY"]
    else:
        header = ["TYPE", "PROVIDER", "GPU", "COUNT", "VRAM/GPU", "TOTAL VRAM", "CAPABILITY"]
    if wide:
        header += ["RAM", "ARCH"]
    header += ["DISK", "$/GB/MO", "BOOT", "FEATURES", "VCPUS", "$/HR"]
    rows = [header]
    for t in results:
        prov = t.provider if t.cloud == t.provider else f"{t.cloud}:{t.provider}"
        unit = "" if piped else " GB"
        row = [t.type] + ([str(catalog.go_num(t.disk_min_gb))] if piped else [])
        row += [prov, t.gpu_name, str(t.gpu_count), f"{catalog.go_num(t.vram_per_gpu_gb)}{unit}"]
        row += [f"{catalog.go_num(t.total_vram_gb)}{unit}", str(catalog.go_num(t.capability))]
        if wide:
            row += [f"{catalog.go_num(t.ram_gb)}{unit}", t.arch]
        row += [f"{catalog.go_num(t.disk_min_gb)}-{catalog.go_num(t.disk_max_gb)}{unit}", "-"]
        row += [catalog.boot_str(t.boot_time_seconds), catalog.features(t), str(t.vcpus)]
        row += [f"{t.price_per_hour:.2f}" if piped else f"${t.price_per_hour:.2f}"]
        rows.append(row)
    if len(rows) == 1 and piped:
        return
    widths = [max(len(r[c]) for r in rows) for c in range(len(header))]
    for r in rows:
        out("  ".join(cell.ljust(w) for cell, w in zip(r, widths, strict=True)).rstrip() + "\n")
    if not piped:
        out(f"\nFound {len(results)} GPU instance types\n")


def cmd_search(ctx: Ctx, p: cobra.Parsed) -> None:
    sub = p.args[0] if p.args else "gpu"
    f = _filters_from(p, cpu=sub == "cpu")
    _print_search(catalog.search(f), as_json=bool(p["json"]), wide=bool(p.values.get("wide")))


CREATE_FLAGS = (
    Flag("name", "n", "string", usage="Base name for the instances (or pass as first argument)"),
    Flag("type", "t", "string", usage="Comma-separated list of instance types to try"),
    Flag("count", "c", "int", 1, usage="Number of instances to create"),
    Flag("parallel", "p", "int", 1, usage="Number of parallel creation attempts"),
    Flag("detached", "d", "bool", usage="Don't wait for instances to be ready"),
    Flag("timeout", "", "int", 300, usage="Timeout in seconds for each instance to become ready"),
    Flag("startup-script", "s", "string", usage="Startup script to run on instance (string or @filepath)"),
    Flag("dry-run", "", "bool", usage="Show matching instance types without creating anything"),
    Flag("mode", "m", "string", "vm", usage="Build mode: vm (default), k8s, container, compose"),
    Flag("jupyter", "", "bool", True, usage="Install Jupyter (default true for vm/k8s modes)"),
    Flag("container-image", "", "string", usage="Container image URL (required for container mode)"),
    Flag("compose-file", "", "string", usage="Docker compose file path or URL (required for compose mode)"),
    Flag("launchable", "l", "string", usage="Launchable ID or URL to deploy (e.g., env-XXX or console URL)"),
    Flag("gpu-name", "g", "string", usage="Filter by GPU name (e.g., A100, H100)"),
    Flag("provider", "", "string", usage="Filter by provider/cloud (e.g., aws, gcp)"),
    Flag("min-vram", "v", "float", usage="Minimum VRAM per GPU in GB"),
    Flag("min-total-vram", "", "float", usage="Minimum total VRAM in GB"),
    Flag("min-capability", "", "float", usage="Minimum GPU compute capability (e.g., 8.0)"),
    Flag("min-disk", "", "float", usage="Minimum disk size in GB"),
    Flag("max-boot-time", "", "int", usage="Maximum boot time in minutes"),
    Flag("stoppable", "", "bool", usage="Only use instances that can be stopped/restarted"),
    Flag("rebootable", "", "bool", usage="Only use instances that can be rebooted"),
    Flag("flex-ports", "", "bool", usage="Only use instances with configurable firewall rules"),
    Flag("sort", "", "string", "price", usage="Sort instance preference by: price, vram, boot-time, etc."),
    Flag("desc", "", "bool", usage="Sort in descending order"),
)
FILTER_FLAGS = (
    "gpu-name",
    "provider",
    "min-vram",
    "min-total-vram",
    "min-capability",
    "min-disk",
    "max-boot-time",
    "stoppable",
    "rebootable",
    "flex-ports",
)


def validate_name(name: str) -> None:
    if not name:
        raise CLIError("name is required")
    if len(name) > 63:
        raise CLIError(f"name must be 63 characters or fewer (got {len(name)})")
    if not (name[0].isascii() and name[0].isalnum()) or not set(name) <= NAME_RE_CHARS:
        raise CLIError(
            "name must start with a letter or digit and contain only letters, digits, hyphens, "
            "underscores, and dots"
        )


def _parse_types(text: str) -> list[tuple[str, float]]:
    text = text.strip()
    if not text:
        return []
    if text.startswith("["):
        try:
            items = json.loads(text)
        except ValueError as e:
            raise CLIError(f"failed to parse JSON input: {e}") from None
        return [(str(i.get("type", "")), float(i.get("target_disk_gb") or 0)) for i in items if i.get("type")]
    specs = []
    for line in text.splitlines():
        cols = line.split()
        if not cols or cols[0] in ("TYPE",):
            continue
        disk = 0.0
        if len(cols) > 1:
            try:
                disk = float(cols[1])
            except ValueError:
                disk = 0.0
        specs.append((cols[0], disk))
    return specs


Log = Callable[[str], None]
CREATE_TRACE = trace(
    "pkg/cmd/gpucreate.(*createContext).createWorkspace", "pkg/cmd/gpucreate/gpucreate.go", 1046
)


def _check_create_flags(p: cobra.Parsed) -> str:
    """Validation that happens before any server call; returns the base name."""
    name = str(p["name"] or (p.args[0] if p.args else ""))
    mode = p["mode"]
    if mode not in ("vm", "k8s", "container", "compose"):
        raise CLIError(f'invalid mode "{mode}": must be one of vm, k8s, container, compose')
    if mode == "container" and not p["container-image"]:
        raise CLIError("--container-image is required for container mode")
    if mode == "compose" and not p["compose-file"]:
        raise CLIError("--compose-file is required for compose mode")
    validate_name(name)
    if p["count"] < 1:
        raise CLIError("--count must be at least 1")
    if p["startup-script"].startswith("@"):
        path = p["startup-script"][1:]
        try:
            Path(path).read_text()
        except OSError as e:
            raise CLIError(f"open {path}: {e.strerror.lower() if e.strerror else e}") from None
    return name


def _resolve_types(ctx: Ctx, p: cobra.Parsed) -> list[tuple[str, float]]:
    """resolveInstanceTypes: --type values, then stdin (JSON from `search --json` or a table),
    else every catalog match of the filters merged with the defaults."""
    specs = [(t.strip(), 0.0) for t in str(p["type"]).split(",") if t.strip()]
    if stdin_piped():
        data = sys.stdin.buffer.read()
        ctx.stdin_bytes += len(data)
        specs += _parse_types(data.decode(errors="replace"))
    if specs:
        return specs
    f = _filters_from(p)
    f.min_total_vram = f.min_total_vram or 20
    f.min_capability = f.min_capability or 8.0
    f.min_disk = f.min_disk or 500
    if not any(n in p.changed for n in FILTER_FLAGS):
        f.max_boot_time = 7
    specs = [(t.type, 0.0) for t in catalog.search(f)]
    if not specs:
        raise CLIError(
            "no GPU instances match the specified filters. Try 'brev search' to see available options"
        )
    return specs


def _skip_reason(ctx: Ctx, itype: str) -> str | None:
    """The CLI-side availability check of one type (logged as `Skipping: ...`)."""
    if itype not in catalog.BY_TYPE:
        return f"instance type \"{itype}\" is not a recognized type; run 'brev search' to see available types"
    if itype in set(ctx.store.fault("capacity") or []):
        return (
            f'instance type "{itype}" is currently unavailable (no capacity); '
            "try again later or run 'brev search' to find another type"
        )
    return None


def _try_type(
    ctx: Ctx,
    sess: Session,
    spec: tuple[str, float],
    base: str,
    count: int,
    created: list[dict[str, Any]],
    log: Log,
) -> bool:
    """One type's worker attempts for the instances still missing. True when a fatal error
    (a duplicate name) ends the whole create."""
    itype, disk = spec
    remaining = count - len(created)
    log(f"Trying {itype} for {remaining} instance(s)...\n")
    skip = _skip_reason(ctx, itype)
    if skip is not None:
        log(f"Skipping: {skip}\n")
        log(f"\nType {itype} had failures, trying next type...\n\n")
        return False
    had_failure = False
    for idx in range(len(created), len(created) + remaining):
        iname = f"{base}-{idx + 1}" if count > 1 else base
        log(f"[Worker 1] Trying {itype} for instance '{iname}'...\n")
        try:
            inst = ctx.backend.create(sess, iname, itype, disk)
        except CLIError as e:
            text = CREATE_TRACE + e.text
            log(f"[Worker 1] {itype} Failed: {text}\n")
            had_failure = True
            if "duplicate workspace" in text:
                log(
                    f"\nError: workspace '{iname}' already exists. "
                    "Use a different name or delete the existing workspace\n"
                )
                return True
            continue
        log(f"[Worker 1] {itype} Success! Created instance '{iname}'\n")
        created.append(inst)
    if len(created) < count and had_failure:
        log(f"\nType {itype} had failures, trying next type...\n\n")
    return False


def cmd_create(ctx: Ctx, p: cobra.Parsed) -> None:
    name = _check_create_flags(p)
    specs = _resolve_types(ctx, p)
    if p["dry-run"]:
        out(", ".join(t for t, _ in specs) + "\n")
        return
    piped = stdout_piped()
    log: Log = err if piped else out
    sess = ctx.session()
    count, parallel = int(p["count"]), max(1, int(p["parallel"]))
    log(f"Attempting to create {count} instance(s) with {parallel} parallel attempts\n")
    shown = ", ".join(f"{t} ({catalog.go_num(d)}GB disk)" if d else t for t, d in specs)
    log(f"Instance types to try: {shown}\n\n")
    created: list[dict[str, Any]] = []
    for spec in specs:
        if len(created) >= count or _try_type(ctx, sess, spec, name, count, created, log):
            break
    if len(created) < count:
        log(f"\nWarning: Only created {len(created)}/{count} instances\n")
        if created:
            log("Successfully created instances:\n")
            for inst in created:
                log(f"  - {inst['name']} (ID: {inst['id']})\n")
        raise CLIError(f"could only create {len(created)}/{count} instances")
    if not p["detached"]:
        log("\nWaiting for instance(s) to be ready...\n")
        log("You can safely ctrl+c to exit\n")
        for inst in created:
            _wait_ready(ctx, inst, float(p["timeout"]) * ctx.store.speed, log)
    if piped:
        for inst in created:
            out(inst["name"] + "\n")
        return
    out(f"\nSuccessfully created {len(created)} instance(s)!\n\n")
    for inst in created:
        out(f"Instance: {inst['name']}\n  ID: {inst['id']}\n  Type: {inst['instance_type']}\n")
        out(f"  Connect:\n    brev open {inst['name']}\n    brev shell {inst['name']}\n\n")


def _wait_ready(ctx: Ctx, inst: dict[str, Any], timeout: float, log: Log) -> None:
    deadline = time.time() + timeout
    poll = ctx.store.delay("create_poll_s", NOMINAL["create_poll_s"])
    while time.time() < deadline:
        cur = ctx.store.read()["instances"].get(inst["id"])
        if cur is None:
            break
        obs = ctx.observe(cur)
        if obs.status == "RUNNING":
            log(f"  {inst['name']}: Ready\n")
            return
        if obs.status == "FAILURE":
            msg = cur.get("status_message")
            log(f"  {inst['name']}: instance {inst['name']} failed{': ' + msg if msg else ''}\n")
            return
        time.sleep(poll)
    log(f"  {inst['name']}: Timeout waiting for ready state\n")


def cmd_delete(ctx: Ctx, p: cobra.Parsed) -> None:
    piped = stdout_piped()
    names = ctx.names_from_args_and_stdin(p.args)
    errors: list[str] = []
    deleted: list[str] = []
    for name in names:
        try:
            inst, obs = ctx.lookup(name)
        except CLIError as e:
            errors.append(
                trace("pkg/cmd/delete.deleteWorkspace", "pkg/cmd/delete/delete.go", 76)
                + trace("pkg/cmd/delete.handleAdminUser", "pkg/cmd/delete/delete.go", 105)
                + e.text
            )
            continue
        ctx.backend.delete(inst, obs)
        if not piped:
            out(
                f"Deleting instance {inst['name']}. This can take a few minutes. "
                "Run 'brev ls' to check status\n"
            )
        deleted.append(name)
    if errors:
        raise CLIError(goerr.multierror(errors))
    if piped:
        for name in deleted:
            out(name + "\n")


def cmd_stop(ctx: Ctx, p: cobra.Parsed) -> None:
    piped = stdout_piped()
    sess = ctx.session()
    if p["all"]:
        out("Turning off all of your instances")
        for inst, obs in ctx.backend.owned_rows(sess):
            if obs.status != "RUNNING":
                continue
            if not inst.get("stoppable"):
                out(f"\n{inst['name']} skipped (does not support stop)")
                continue
            ctx.backend.stop(inst)
            out(f"\n{inst['name']} stopped ✓")
        out("\n")
        return
    names = ctx.names_from_args_and_stdin(p.args)
    errors = []
    for name in names:
        try:
            inst, obs = ctx.lookup(name, whole_org=True)  # stop alone falls back to the org
            if not inst.get("stoppable"):
                raise CLIError(f'instance "{inst["name"]}" does not support stop.')
            if not can("stop", obs.status):
                raise CLIError(
                    f"400 Bad Request: workspace {inst['id']} is not running (status {obs.status})"
                )
            ctx.backend.stop(inst)
        except CLIError as e:
            errors.append(trace("pkg/cmd/stop.stopWorkspace", "pkg/cmd/stop/stop.go", 183) + e.text)
            continue
        if not piped:
            out(
                f"Stopping instance {name}.\n"
                "Note: this can take a few seconds. Run 'brev ls' to check status\n"
            )
    if errors:
        raise CLIError(goerr.multierror(errors))
    if piped:
        for name in names:
            out(name + "\n")


START_FLAGS = (
    Flag("detached", "d", "bool", usage="run the command in the background instead of blocking the shell"),
    Flag("empty", "e", "bool", usage="create an empty instance"),
    Flag("name", "n", "string", usage="name your instance when creating a new one"),
    Flag("setup-script", "s", "string", usage="takes a raw gist url to an env setup script"),
    Flag(
        "setup-repo",
        "r",
        "string",
        usage="repo that holds env setup script. you must pass in --setup-path if you use this argument",
    ),
    Flag(
        "setup-path",
        "p",
        "string",
        usage="path to env setup script. "
        "If you include --setup-repo we will apply this argument to that repo",
    ),
    Flag("org", "o", "string", usage="organization (will override active org if creating an instance)"),
    Flag(
        "gpu",
        "g",
        "string",
        "n1-highmem-4:nvidia-tesla-t4:1",
        usage="GPU instance type.  See "
        "https://docs.nvidia.com/brev/latest/quick-start.html#select-your-compute for details",
    ),
)


def cmd_start(ctx: Ctx, p: cobra.Parsed) -> None:
    piped = stdout_piped()
    names = list(p.args[:1])
    batch = False
    if not names and stdin_piped():
        names = ctx.read_stdin_lines()
        batch = True
    if not names:
        raise CLIError("name field is required for empty workspaces")
    failures = 0
    for name in names:
        try:
            _start_one(ctx, name, detached=bool(p["detached"]) or batch, piped=piped)
        except CLIError as e:
            if not batch:
                raise
            failures += 1
            err(f"Error starting {name}: {e.text}\n")
    if failures:
        raise CLIError(f"failed to start {failures} instance(s)")


def _start_one(ctx: Ctx, name: str, *, detached: bool, piped: bool) -> None:
    try:
        inst, obs = ctx.lookup(name)
    except CLIError as e:
        if "not found" not in e.text:
            raise
        # Not an instance: the CLI treats the argument as a local path (SIM-CONTRACT.md section 4).
        out("tried to start with local path but path not found\n")
        if piped:
            out(name + "\n")
        return
    if obs.status != "STOPPED":
        raise CLIError(f"Instance is not stopped status={obs.status}")
    ctx.backend.start(inst)
    out(
        f"Instance {inst['name']} is starting. \nNote: this can take about a minute. "
        "Run 'brev ls' to check status\n\n"
    )
    if detached:
        return
    out("You can safely ctrl+c to exit\n")
    # the real CLI polls forever: no timeout, no FAILURE check
    if not ctx.wait_running(inst["id"], None):
        raise CLIError(f"instance with id/name {inst['name']} not found")
    out("Your instance is ready!\n")
    out(f"To connect to your instance, run:\n\tbrev shell {inst['name']}\n")


def refresh_ssh(ctx: Ctx) -> None:
    """refresh.RunRefresh: ssh config for the instances RUNNING now (+ cloudflared download)."""
    rows = [i for i, o in ctx.backend.owned_rows(ctx.session()) if o.status == "RUNNING"]
    try:
        ports = control.request(ctx.store.root, "ports", ids=[str(i["id"]) for i in rows])["ports"]
        key: bytes | None = (ctx.store.root / "brev.pem").read_bytes()
    except (control.DaemonDown, OSError):
        ports, key = {}, None  # nothing serves ssh: port 22 on loopback refuses
    running = [(str(i["name"]), int(ports.get(str(i["id"]), 22))) for i in rows]
    write_brev_ssh_files(ctx.home, running, key)
    cloudflared = ctx.home / ".brev" / "cloudflared"
    if not cloudflared.exists():
        cloudflared.write_text("#!/bin/sh\necho 'cloudflared (simulated)'\n")
        cloudflared.chmod(0o755)


def cmd_refresh(ctx: Ctx, p: cobra.Parsed) -> None:
    out("refreshing brev...\n")
    refresh_ssh(ctx)
    out("brev has been refreshed\n")


LOGIN_FLAGS = (
    Flag("token", "", "string", usage="token provided to auto login"),
    Flag("api-key", "", "string", usage="api key to authenticate CLI requests", hidden=True),
    Flag("org-id", "", "string", usage="organization ID for API key auth", hidden=True),
    Flag("skip-browser", "", "bool", usage="print url instead of auto opening browser"),
    Flag("email", "", "string", usage="email to use for authentication"),
    Flag("auth", "", "string", usage="authentication provider to use (nvidia or legacy, default is nvidia)"),
)


def cmd_login(ctx: Ctx, p: cobra.Parsed) -> None:
    if p.args:
        raise CLIError(f'unknown command "{p.args[0]}" for "brev login"')
    store = ctx.store
    # A fresh login ends an injected run of auth EOFs (SIM-CONTRACT: auth_eof_once).
    if store.fault("auth_eof_once"):
        store.set_fault("auth_eof_once", 0)
    if p["auth"] and p["auth"] not in ("nvidia", "legacy"):
        raise CLIError("auth provider must be nvidia or legacy")
    if p["api-key"].strip():
        if p["token"] or p["skip-browser"] or p["email"] or p["auth"]:
            raise CLIError("api-key cannot be used with token, skip-browser, email, or auth flags")
        org = p["org-id"].strip()
        if not org:
            raise CLIError(
                "api key auth requires an org id; run brev login --api-key <api-key> --org-id <org-id>"
            )
        ctx.auth.save(
            {"access_token": "", "refresh_token": "", "api_key": p["api-key"].strip(), "api_key_org_id": org}
        )
        write_json(ctx.home / ".brev" / "active_org.json", {"id": org, "name": org})
        out(f"API key saved for org {org}")
        return
    ctx.auth.standard_login_stray_line()
    out("\n   ▸     Starting Login\n\n")
    if p["token"]:
        token = p["token"]
        if jwt_valid_client_side(token, store.now()):
            ctx.auth.save({"access_token": token, "refresh_token": "auto-login"})
        else:
            ctx.auth.save({"access_token": "auto-login", "refresh_token": token})
    else:
        out("Login here: https://login.nvidia.com/device?user_code=SIM-CODE\n")
        time.sleep(store.delay("device_login_s", NOMINAL["device_login_s"]))
        raise CLIError("timed out waiting for login")
    sess = ctx.session()
    write_json(ctx.home / ".brev" / "active_org.json", {"id": sess.org_id, "name": sess.org_name})
    out(f"current organization: {sess.org_name}\n")
    out("\nCreate an instance:\n\tbrev create my-instance\n")


def cmd_logout(ctx: Ctx, p: cobra.Parsed) -> None:
    with contextlib.suppress(FileNotFoundError):
        ctx.auth.creds_path.unlink()


def cmd_org(ctx: Ctx, p: cobra.Parsed) -> None:
    sess = ctx.session()
    if (p.args and p.args[0] == "set") or (p.args and p.args[0] not in ("ls", "list")):
        target = p.args[-1]
        if target != sess.org_name:
            raise CLIError(f"no orgs exist with name {target}")
        out(f"Org {target} is now active 🤙\n")
        return
    out(f"NAME      ID\n* {sess.org_name}  {sess.org_id}\n")


# -- exec ---------------------------------------------------------------------------------------
EXEC_FLAGS = (Flag("host", "", "bool", usage="ssh into the host machine instead of the container"),)


def _exec_error(ctx: Ctx, code: int) -> str:
    return trace("pkg/cmd/exec.runSSHWithTimeout", "pkg/cmd/exec/exec.go", 335) + f"exit status {code}"


def run_ssh_pipeline(ctx: Ctx, alias: str, command: str, timeout: int) -> int:
    """runSSHWithTimeout: the local bash/ssh-agent/ssh pipeline, for real, through PATH."""
    escaped = command.replace("'", "'\\''")
    agent = 'if [ -z "$SSH_AUTH_SOCK" ]; then eval $(ssh-agent -s) > /dev/null; fi'
    script = f"{agent} && ssh -T -o ConnectTimeout={timeout} -o LogLevel=ERROR {alias} '{escaped}'"
    record_call(ctx.store.calls_path, "bash", ["-c", script])
    sys.stdout.flush()
    sys.stderr.flush()
    return subprocess.run(
        ["bash", "-c", script], stdin=subprocess.DEVNULL, env=ctx.child_env(), check=False
    ).returncode


def wait_for_ssh(ctx: Ctx, alias: str) -> str | None:
    """util.WaitForSSHToBeAvailable: retries only while the 2nd output line looks transient."""
    interval = ctx.store.delay("ssh_wait_interval_s", NOMINAL["ssh_wait_interval_s"])
    counter = 0
    while True:
        proc = subprocess.run(
            ["ssh", "-o", "ConnectTimeout=10", alias, "echo", " "],
            stdin=subprocess.DEVNULL,
            stdout=subprocess.PIPE,
            stderr=subprocess.STDOUT,
            env=ctx.child_env(),
            check=False,
        )
        if proc.returncode == 0:
            return None
        output = proc.stdout.decode(errors="replace")
        lines = output.split("\n")
        std_err = lines[1] if len(lines) > 1 else output
        transient = any(
            s in std_err
            for s in ("Connection refused", "Operation timed out", "Warning:", "Connection timed out")
        )
        if counter == 40 or not transient:
            return trace("pkg/cmd/util.WaitForSSHToBeAvailable", "pkg/cmd/util/ssh.go", 75) + "\n" + std_err
        counter += 1
        time.sleep(interval)


def exec_on_instance(ctx: Ctx, name: str, host: bool, command: str) -> None:
    alias = f"{name}-host" if host else name
    code = run_ssh_pipeline(ctx, alias, command, 5)
    if code == 0:
        return
    err("Connection failed, checking instance status...\n")
    try:
        inst, obs = ctx.lookup(name)
    except CLIError:
        raise CLIError(
            f'ssh connection failed and could not look up instance "{name}": {_exec_error(ctx, code)}'
            "\nPlease check your instances with: brev ls"
        ) from None
    alias = f"{inst['name']}-host" if host else inst["name"]
    if obs.status == "STOPPED":
        ctx.backend.start(inst)
        out(f"Instance {inst['name']} is starting. \n\n")
        if not ctx.wait_running(inst["id"], time.time() + 600 * ctx.store.speed):
            raise CLIError("timeout waiting for instance to be ready")
        refresh_ssh(ctx)
        wait_err = wait_for_ssh(ctx, alias)
        if wait_err is not None:
            raise CLIError(wait_err)
    elif obs.status != "RUNNING":
        raise CLIError(f'instance "{name}" is in state "{obs.status}" — please check with: brev ls')
    else:
        refresh_ssh(ctx)
        wait_err = wait_for_ssh(ctx, alias)
        if wait_err is not None:
            raise CLIError(f'could not connect to instance "{name}": {wait_err}\nPlease check with: brev ls')
    code = run_ssh_pipeline(ctx, alias, command, 10)
    if code != 0:
        raise CLIError(f"exit status {code}")


def cmd_exec(ctx: Ctx, p: cobra.Parsed) -> None:
    if not p.args:
        raise CLIError("requires at least 1 arg(s), only received 0")
    command = p.args[-1]
    names = ctx.names_from_args_and_stdin(p.args[:-1])
    if not names:
        raise CLIError("instance name required: provide as argument or pipe from another command")
    if command.startswith("@"):
        path = command[1:]
        try:
            command = Path(path).read_text()
        except OSError as e:
            raise CLIError(f"open {path}: {(e.strerror or str(e)).lower()}") from None
    if not command:
        raise CLIError("command is required")
    piped = stdout_piped()
    errors = []
    for name in names:
        if len(names) > 1:
            err(f"\n=== {name} ===\n")
        try:
            exec_on_instance(ctx, name, bool(p["host"]), command)
        except CLIError as e:
            if len(names) == 1:
                raise
            text = trace("pkg/cmd/exec.NewCmdExec.func1", "pkg/cmd/exec/exec.go", 104) + e.text
            err(f"Error on {name}: {text}\n")
            errors.append(text)
            continue
        if piped:
            out(name + "\n")
    if errors:
        raise CLIError(goerr.multierror(errors))


# -- dispatch -----------------------------------------------------------------------------------
COMMANDS: dict[str, tuple[Any, tuple[Flag, ...], str, str]] = {
    "create": (cmd_create, CREATE_FLAGS, "create [name]", "Create GPU instances with automatic retry"),
    "delete": (cmd_delete, (), "delete", "Delete an instance"),
    "exec": (cmd_exec, EXEC_FLAGS, "exec [instance...] <command>", "Execute a command on instance(s)"),
    "login": (cmd_login, LOGIN_FLAGS, "login", "Log into Brev"),
    "logout": (cmd_logout, (), "logout", "Log out of brev"),
    "ls": (cmd_ls, LS_FLAGS, "ls", "List instances within active org"),
    "org": (cmd_org, (), "org", "Organization commands"),
    "refresh": (cmd_refresh, (), "refresh", "Force a refresh to the SSH config"),
    "search": (cmd_search, SEARCH_FLAGS, "search [gpu|cpu]", "Search and filter GPU instance types"),
    "start": (cmd_start, START_FLAGS, "start", "Start a stopped instance or create a new instance"),
    "stop": (cmd_stop, (Flag("all", "a", "bool", usage="stop all instances"),), "stop", "Stop an instance"),
}
ALIASES = {"provision": "create", "list": "ls", "set": "org"}
# Commands that read stdin as instance names/types (and so panic on a closed fd 0).
NO_AUTH = {"search", "login", "logout"}
# Commands that call Brev's API, and the path their first request names (api_rate_limit).
API_URL = "https://brevapi.us-west-2-prod.control-plane.brev.dev"
API_CALLS = {
    "ls": "organizations/{org}/workspaces",
    "create": "organizations/{org}/workspaces",
    "delete": "workspaces/{id}",
    "stop": "workspaces/{id}/stop",
    "start": "workspaces/{id}/start",
    "refresh": "organizations/{org}/workspaces",
    "search": "v1/instance/types",
    "exec": "organizations/{org}/workspaces",
    "login": "me",
}


def run(ctx: Ctx, argv: list[str]) -> None:
    name, idx = cobra.find_command(argv)
    if name is None:
        p = cobra.parse(argv, ())
        if p["version"]:
            ctx.auth.standard_login_stray_line()
            out(f"Current Version: {ctx.store.config().get('version', 'v0.6.327')}\n")
            return
        out("brev is a tool for managing GPU instances\n\nUsage:\n  brev [command]\n\nAvailable Commands:\n")
        for c, (_, _, _, short) in sorted(COMMANDS.items()):
            out(f"  {c.ljust(12)} {short}\n")
        return
    canonical = ALIASES.get(name, name)
    if canonical not in COMMANDS:
        raise cobra.unknown_command(name, "brev", sorted(COMMANDS))
    fn, flags, use, short = COMMANDS[canonical]
    rest = argv[:idx] + argv[idx + 1 :]
    if canonical == "set":
        rest = ["set", *rest]
    p = cobra.parse(rest, flags)
    if p["help"]:
        aliases = tuple(a for a, c in ALIASES.items() if c == canonical)
        out(cobra.help_text(use, short, flags, (canonical, *aliases) if aliases else ()))
        return
    if canonical not in NO_AUTH:
        ctx.auth.standard_login_stray_line()
    limit = ctx.store.fault("api_rate_limit")
    if limit is not None and canonical in API_CALLS and not ctx.store.admit_api_call(float(limit)):
        # pkg/store/http.go: a body that is no JSON error list prints as `<url> <status> <body>`.
        raise CLIError(
            f"{API_URL}/api/{API_CALLS[canonical]} 429 Too Many Requests "
            '{"message":"rate limit exceeded, slow down"}'
        )
    fn(ctx, p)


def main(state: str, bin_dir: str, argv: list[str]) -> int:
    store = Store(state)
    ctx = Ctx(store, Path(bin_dir))
    ctx.call_id = record_call(store.calls_path, "brev", argv)
    code = 0
    try:
        run(ctx, argv)
    except CLIError as e:
        sys.stdout.flush()
        err(e.text + "\n")  # cmderrors: fmt.Fprintln(os.Stderr, errors.Cause(err))
        code = 1
    except Panic:
        sys.stdout.flush()
        err(goerr.GO_PANIC)
        code = 2
    except BrokenPipeError:
        code = 1
    except KeyboardInterrupt:
        code = 130
    finally:
        record_stdin(store.calls_path, ctx.call_id, ctx.stdin_bytes)
    return code
