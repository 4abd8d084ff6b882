"""The simulator's state directory: config, faults, the instance database, per-instance sandboxes.

Every writer takes an exclusive fcntl lock on `db.lock`; files are replaced atomically (write a
temp file, rename), so readers never see a torn file and many concurrent invocations stay safe.
"""

from __future__ import annotations

import contextlib
import fcntl
import json
import os
import time
from collections.abc import Iterator
from pathlib import Path
from typing import Any

from tests.brevsim import faults as knobs

Json = dict[str, Any]
# read_shared()'s parsed databases: path -> ((inode, mtime ns, size), database)
SHARED_SETTLE_S = 0.05
_SHARED: dict[Path, tuple[tuple[int, int, int], Json]] = {}


def read_json(path: Path, default: Any) -> Any:
    try:
        with path.open() as f:
            return json.load(f)
    except FileNotFoundError:
        return default


def write_json(path: Path, value: Any) -> None:
    tmp = path.with_name(f".{path.name}.{os.getpid()}.tmp")
    with tmp.open("w") as f:
        # Compact: json's C encoder (indent= falls back to the pure-Python one, ~5x slower; with
        # 1,000 instances every `brev` call that writes the database paid ~0.2 s for it).
        json.dump(value, f, sort_keys=True, separators=(",", ":"))
    tmp.replace(path)


@contextlib.contextmanager
def flocked(lock_path: Path, *, shared: bool = False) -> Iterator[None]:
    fd = os.open(lock_path, os.O_RDWR | os.O_CREAT, 0o600)
    try:
        fcntl.flock(fd, fcntl.LOCK_SH if shared else fcntl.LOCK_EX)
        yield
    finally:
        os.close(fd)  # closing releases the lock


class Store:
    """Paths and transactions of one simulator state directory."""

    def __init__(self, state: Path | str) -> None:
        self.root = Path(state)
        self.db_path = self.root / "db.json"
        self.lock_path = self.root / "db.lock"
        self.config_path = self.root / "config.json"
        self.faults_path = self.root / "faults.json"
        self.calls_path = self.root / "calls.jsonl"
        self.instances_dir = self.root / "instances"
        self._config: Json | None = None
        self._faults: Json | None = None

    # -- config / clock ---------------------------------------------------------------------
    def config(self) -> Json:
        if self._config is None:
            self._config = read_json(self.config_path, {})
        return self._config

    @property
    def speed(self) -> float:
        return float(self.config().get("speed", 1.0))

    def now(self) -> float:
        # The offset lets the harness move the simulated clock (moto's injected clock habit).
        return time.time() + float(read_json(self.root / "clock.json", {}).get("offset", 0.0))

    def nominal(self, key: str, default: float) -> float:
        value = self.faults().get(key)
        if value is not None:
            return float(value)
        return float(self.config().get("nominal", {}).get(key, default))

    def delay(self, key: str, default: float) -> float:
        """A simulated delay in real seconds: nominal seconds x speed."""
        return self.nominal(key, default) * self.speed

    # -- faults ------------------------------------------------------------------------------
    def faults(self) -> Json:
        """Faults as of this invocation's first look (each invocation is a short-lived process).
        Raises UnknownFault if faults.json names a knob that faults.py does not declare."""
        if self._faults is None:
            value = read_json(self.faults_path, {})
            value = value if isinstance(value, dict) else {}
            knobs.check(value)
            self._faults = value
        return self._faults

    def fault(self, name: str) -> Any:
        """One declared knob's current value (its declared default when unset)."""
        value = self.faults().get(name)
        return knobs.default(name) if value is None else value

    def set_fault(self, key: str, value: Any) -> None:
        knobs.check({key: value})
        with flocked(self.root / "faults.lock"):
            faults = read_json(self.faults_path, {})
            faults[key] = value
            write_json(self.faults_path, faults)
        self._faults = None

    def consume_fault_counter(self, key: str) -> bool:
        """Decrement an integer fault (e.g. auth_eof_once); True when it was positive."""
        knobs.check({key: None})
        with flocked(self.root / "faults.lock"):
            self._faults = None
            faults = self.faults()
            count = int(faults.get(key) or 0)
            if count <= 0:
                return False
            faults[key] = count - 1
            write_json(self.faults_path, faults)
            self._faults = None
            return True

    def consume_omissions(self, keys: set[str]) -> set[str]:
        """`ls_omit` ({name or id: N}): which of `keys` this listing leaves out; each hit spends one."""
        with flocked(self.root / "faults.lock"):
            self._faults = None
            faults = self.faults()
            pending = dict(faults.get("ls_omit") or {})
            hit = {k for k in keys if int(pending.get(k) or 0) > 0}
            if not hit:
                return set()
            for k in hit:
                pending[k] = int(pending[k]) - 1
            faults["ls_omit"] = pending
            write_json(self.faults_path, faults)
            self._faults = None
            return hit

    def admit_api_call(self, limit: float) -> bool:
        """The `api_rate_limit` window, shared by every CLI process: whether one more call fits; a
        refused call is not counted (as a server that answered 429). One nominal second, but never
        under one real second (the limit scaled to it): below that, the CLI processes' start-up
        jitter, not the caller's pace, would decide which call is refused."""
        window = max(self.speed, 1.0)
        limit = limit * window / self.speed
        with flocked(self.root / "ratelimit.lock"):
            now = time.time()
            admitted = [t for t in read_json(self.root / "ratelimit.json", []) if t > now - window]
            if len(admitted) >= limit:
                refused = self.root / "ratelimit-refused.json"
                write_json(refused, int(read_json(refused, 0)) + 1)
                return False
            admitted.append(now)
            write_json(self.root / "ratelimit.json", admitted)
            return True

    # -- instance database -------------------------------------------------------------------
    def read(self) -> Json:
        db = read_json(self.db_path, None)
        return db if isinstance(db, dict) else empty_db()

    def read_shared(self) -> Json:
        """`read()` for the long-lived daemon, which reads the database on every ssh connection
        and session: parsed again only when the file changed (every write renames a new file
        into place), so 1,000 instances' sessions do not each parse the whole fleet. The result
        is shared between callers: read it, never change it."""
        try:
            info = self.db_path.stat()
        except FileNotFoundError:
            return empty_db()
        stamp = (info.st_ino, info.st_mtime_ns, info.st_size)
        cached = _SHARED.get(self.db_path)
        if cached is not None and cached[0] == stamp:
            return cached[1]
        began = time.time()
        db = self.read()
        # File times tick coarsely (a few ms) and inode numbers are reused: a write in the same
        # tick as the one parsed could look unchanged. Kept only once the file is older than that.
        if began - info.st_mtime > SHARED_SETTLE_S:
            _SHARED[self.db_path] = (stamp, db)
        return db

    @contextlib.contextmanager
    def tx(self) -> Iterator[Json]:
        with flocked(self.lock_path):
            db = self.read()
            yield db
            write_json(self.db_path, db)

    def instance_dir(self, instance_id: str) -> Path:
        return self.instances_dir / instance_id


def empty_db() -> Json:
    return {"instances": {}, "created_count": {}, "sessions": {}, "seq": 0}
