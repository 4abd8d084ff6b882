"""Which receivers a job's events go to: the TaoBrevNotifiers of its namespace, with the URL and
signing key from the Secret each one names.

Notifiers are listed per namespace (a handful, no Secret involved: `list` on taobrevnotifiers is
harmless), kept `max_age` seconds; their Secrets are read by name like a job's own (the same
RoleBinding and allow-list label, controller/kube/access.py) through a cache of the same age. The
URL and key are registered with the redaction step the moment they are read, and a `Sink` never
shows them (repr), so neither reaches a log line, an Event, a status or a metric label.
"""

from __future__ import annotations

import time
from collections.abc import Awaitable, Callable, Mapping
from dataclasses import dataclass, field
from datetime import datetime
from typing import Any

import structlog
from pydantic import ValidationError

from controller.api.errors import TaoBrevError
from controller.api.models import NotifySpec
from controller.api.notifier import HMAC_KEY, URL_KEY, NotifierJobs, TaoBrevNotifierSpec
from controller.api.timestamps import parse_time
from controller.api.vocabulary import NotifyFormat, Transition
from controller.kube.secret_cache import SecretCache, SecretData
from controller.observability.logs import register_secret

log = structlog.get_logger("taobrev.notify")


@dataclass(frozen=True)
class Sink:
    """One notifier, ready to post to. `url` and `key` are secret: never shown."""

    namespace: str
    name: str
    format: NotifyFormat
    events: tuple[Transition, ...]
    timeout: float
    created_at: datetime | None
    url: str = field(repr=False)
    key: bytes | None = field(repr=False, default=None)

    @property
    def label(self) -> str:
        return f"{self.namespace}/{self.name}"


@dataclass(frozen=True)
class Unusable:
    """A notifier the job should use that cannot be used now, and why (no secret in the text)."""

    namespace: str
    name: str
    why: str


def parse_notifier(obj: Mapping[str, Any]) -> tuple[str, TaoBrevNotifierSpec | None, datetime | None, str]:
    """(name, spec or None, creationTimestamp, why the spec does not parse)."""
    meta = obj.get("metadata") or {}
    name = str(meta.get("name") or "")
    created = parse_time(meta.get("creationTimestamp"))
    try:
        return name, TaoBrevNotifierSpec.model_validate(obj.get("spec") or {}), created, ""
    except ValidationError as exc:
        first = exc.errors()[0] if exc.errors() else {"loc": (), "msg": str(exc)}
        where = ".".join(str(p) for p in first["loc"])
        return name, None, created, f"spec.{where}: {first['msg']}; fix the TaoBrevNotifier"


class SinkDirectory:
    def __init__(
        self,
        list_notifiers: Callable[[str], Awaitable[list[dict[str, Any]]]],
        read_secret: Callable[[str, str], Awaitable[SecretData | None]],
        max_age: float,
        clock: Callable[[], float] = time.monotonic,
    ) -> None:
        self._list = list_notifiers
        self._secrets = SecretCache(read_secret, max_age)
        self._max_age = max_age
        self._clock = clock
        self._listed: dict[str, tuple[float, list[dict[str, Any]]]] = {}

    async def _notifiers(self, namespace: str) -> list[dict[str, Any]]:
        kept = self._listed.get(namespace)
        now = self._clock()
        if kept is not None and now - kept[0] <= self._max_age:
            return kept[1]
        items = await self._list(namespace)
        self._listed[namespace] = (now, items)
        return items

    async def for_job(self, namespace: str, notify: NotifySpec | None) -> tuple[list[Sink], list[Unusable]]:
        """The sinks of a job in `namespace` with `spec.notify`, and the notifiers it should use
        that cannot be used (missing, unreadable Secret, bad URL). Raises a TaoBrevError when the
        notifiers cannot be listed (the caller retries)."""
        named = set(notify.notifiers) if notify is not None else set()
        defaults = notify is None or notify.namespace_notifiers
        sinks: list[Sink] = []
        unusable: list[Unusable] = []
        seen: set[str] = set()
        for obj in await self._notifiers(namespace):
            name, spec, created, why = parse_notifier(obj)
            seen.add(name)
            if spec is None:
                if name in named or defaults:
                    unusable.append(Unusable(namespace, name, why))
                continue
            if not (name in named or (defaults and spec.jobs == NotifierJobs.ALL)):
                continue
            sink = await self._sink(namespace, name, spec, created, unusable)
            if sink is not None:
                sinks.append(sink)
        for name in sorted(named - seen):
            unusable.append(
                Unusable(namespace, name, f"spec.notify.notifiers names {name!r}, which does not exist")
            )
        return sinks, unusable

    async def _sink(
        self,
        namespace: str,
        name: str,
        spec: TaoBrevNotifierSpec,
        created: datetime | None,
        unusable: list[Unusable],
    ) -> Sink | None:
        ref = spec.secret_ref
        try:
            data = await self._secrets.get(namespace, ref.name)
        except TaoBrevError as exc:
            unusable.append(Unusable(namespace, name, str(exc)))
            return None
        if data is None:
            why = (
                f"Secret {namespace}/{ref.name} (spec.secretRef.name) does not exist; create it with "
                f"key {URL_KEY!r}"
            )
            unusable.append(Unusable(namespace, name, why))
            return None
        raw_url = data.get(URL_KEY) or b""
        url = raw_url.decode(errors="replace").strip()
        key = data.get(HMAC_KEY) or None
        register_secret(url)
        if key is not None:
            register_secret(key.decode(errors="replace"))
        if not url.startswith(("http://", "https://")):
            why = (
                f"Secret {namespace}/{ref.name} key {URL_KEY!r} is missing or "
                "not an http(s) URL; put the receiver's URL there"
            )
            unusable.append(Unusable(namespace, name, why))
            return None
        return Sink(
            namespace=namespace,
            name=name,
            format=spec.format,
            events=tuple(spec.events),
            timeout=float(spec.timeout_seconds),
            created_at=created,
            url=url,
            key=key,
        )
