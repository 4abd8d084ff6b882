"""A recording `BrevClient` for the remote-command tests: no I/O, a function answers each command."""

from __future__ import annotations

from collections.abc import Callable, Sequence
from dataclasses import dataclass, field

from controller.brev.client import CreateRequest, CreateResult, ExecResult, Instance, SearchResult

GONE = "TAOBREV_SECRETS_GONE"


def healthy_answer(command: str) -> str:
    """What a healthy instance prints for the operator's commands whose output is checked beyond
    the exit code: the probe's "ok", the cleanup's report (both parts removed); else "0"."""
    if command == "echo ok":
        return "ok"
    if "TAOBREV_CLEARED" in command:
        return "TAOBREV_CLEARED 0 0"
    return "0"


@dataclass
class FakeClient:
    """Records every call in order; `answer` maps a command to (exit code, stdout) — the removal
    marker is appended for commands that set the trap, as bash would print it."""

    answer: Callable[[str], tuple[int, str]] = lambda _cmd: (0, "")
    commands: list[str] = field(default_factory=list)
    timeouts: list[float] = field(default_factory=list)
    puts: list[tuple[str, str, bytes, int]] = field(default_factory=list)
    # ("put", remote path) and ("exec", command) in call order.
    events: list[tuple[str, str]] = field(default_factory=list)
    # False: the removal trap's marker is missing (as when bash was killed before its EXIT trap).
    trap_runs: bool = True

    async def ssh_exec(
        self,
        instance: str,
        command: str,
        *,
        timeout: float,  # noqa: ASYNC109
        own_connection: bool = False,
    ) -> ExecResult:
        return await self._answer(command, timeout)

    async def _answer(self, command: str, timeout: float) -> ExecResult:  # noqa: ASYNC109
        self.commands.append(command)
        self.timeouts.append(timeout)
        self.events.append(("exec", command))
        rc, out = self.answer(command)
        # What the remote shell prints: a command that set the removal trap ends with its marker.
        marker = f"\n{GONE}\n" if self.trap_runs and GONE in command else ""
        return ExecResult(rc, out + marker)

    async def put_file(
        self,
        instance: str,
        remote_path: str,
        content: bytes,
        *,
        mode: int = 0o600,
        timeout: float,  # noqa: ASYNC109
    ) -> None:
        self.puts.append((instance, remote_path, content, mode))
        self.timeouts.append(timeout)
        self.events.append(("put", remote_path))

    async def ensure_login(self) -> None: ...
    async def version(self) -> str:
        return "v0"

    async def identity(self) -> str:
        return "fake-identity"

    async def list_instances(self) -> Sequence[Instance]:
        return []

    async def get_instance(self, name: str) -> Instance | None:
        return None

    async def create_instance(self, request: CreateRequest) -> CreateResult:
        return CreateResult(request.name, False)

    async def delete_instance(self, name_or_id: str) -> None: ...
    async def start_instance(self, name: str) -> None: ...
    async def refresh(self) -> None: ...
    async def search(
        self, *, gpu_name: str | None = None, min_vram: float | None = None
    ) -> Sequence[SearchResult]:
        return []
