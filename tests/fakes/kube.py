"""Kubernetes as the reconciler sees it: Secrets to read, TaoBrevJob objects whose status is
merge-patched (RFC 7386, as the API server applies `patch_namespaced_custom_object_status`), a
finalizer that holds deletion until teardown is done, and Events.

`read_secret` and `patch_status` answer like the real `KubeAccess`: None for a missing Secret,
`SecretAccessDenied` for one the operator may not read (`deny_secret`); False (404) once the object
is gone. With `max_list_items` set, a status holding a longer list is refused (422, as the CRD's
maxItems would), then retried trimmed and minimal as `KubeAccess` does, and only if the minimal
status is refused too does it raise `StatusRejected`. No raw `ApiException` ever leaves it.
"""

from __future__ import annotations

import copy
import json
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any, TypeVar

from controller.api.errors import KubeAccessDenied, KubeUnavailable, SecretAccessDenied, StatusRejected
from controller.kube.access import KubeAccess, minimal_status, trimmed_status

T = TypeVar("T")

CONFIG_MAP_MAX_BYTES = 1024 * 1024  # the API server's limit on a ConfigMap's data (keys + values)


def merge_patch(target: Any, patch: Any) -> Any:
    """RFC 7386: objects merge key by key, null deletes, anything else replaces. The result shares
    unchanged parts with `target` and replaced ones with `patch`: stored statuses are replaced
    whole, never mutated, so sharing is safe (and copying dominated the model test's time)."""
    if not isinstance(patch, Mapping):
        return patch
    out = dict(target) if isinstance(target, Mapping) else {}
    for key, value in patch.items():
        if value is None:
            out.pop(key, None)
        else:
            out[key] = merge_patch(out.get(key), value)
    return out


def _as_json(value: Any) -> Any:
    """What goes over the wire: pydantic models by alias, then plain JSON (dates as strings)."""
    dump = getattr(value, "model_dump", None)
    if callable(dump):
        value = dump(by_alias=True, exclude_none=True, mode="json")
    return json.loads(json.dumps(value, default=str))


@dataclass
class FakeObject:
    namespace: str
    name: str
    uid: str
    spec: dict[str, Any]
    generation: int = 1
    status: dict[str, Any] = field(default_factory=dict)
    deletion_requested: bool = False
    created: str = "2026-11-29T11:00:00Z"
    finalized: bool = True  # kopf's finalizer patch has landed (it may not have, on a first pass)
    annotations: dict[str, str] = field(default_factory=dict)

    def body(self) -> dict[str, Any]:
        meta: dict[str, Any] = {
            "namespace": self.namespace,
            "name": self.name,
            "uid": self.uid,
            "generation": self.generation,
            "finalizers": ["taobrev.io/teardown"] if self.finalized else [],
            "creationTimestamp": self.created,
        }
        if self.deletion_requested:
            meta["deletionTimestamp"] = "2026-11-29T12:00:00Z"
        if self.annotations:
            meta["annotations"] = dict(self.annotations)
        # Shared, not copied: the reconciler copies what it keeps (JobRef.from_body), and a copy
        # per pass would dominate the model test's run time. Status is replaced, never mutated.
        return {"metadata": meta, "spec": self.spec, "status": self.status}


@dataclass(frozen=True)
class StatusWrite:
    namespace: str
    name: str
    patch: dict[str, Any]
    status: dict[str, Any]  # the object's status after the patch


class FakeKube(KubeAccess):
    """A `KubeAccess` (subclassed so the Reconciler's annotation holds) with no API client."""

    def __init__(self, *, max_list_items: int | None = None) -> None:  # no super(): no client
        self.secrets: dict[tuple[str, str], dict[str, bytes]] = {}
        self.denied: set[tuple[str, str]] = set()
        self.objects: dict[tuple[str, str], FakeObject] = {}
        self.writes: list[StatusWrite] = []
        self.rejected: list[dict[str, Any]] = []
        self.secret_reads = 0
        self.max_list_items = max_list_items
        self.namespace_uids: dict[str, str] = {"kube-system": "kube-system-uid-0001"}
        self.config_maps: dict[tuple[str, str], tuple[dict[str, str], int]] = {}
        self.list_fails: Exception | None = None  # list_jobs raises this when set
        self.config_map_fails: Exception | None = None  # read_config_map raises this when set
        # Namespace annotations (quota overrides); a namespace in `denied_namespaces` answers 403.
        self.namespaces: dict[str, dict[str, str]] = {}
        self.denied_namespaces: set[str] = set()
        # The `finished` argument of every TaoBrevJob listing, in order (None: all jobs).
        self.job_listings: list[bool | None] = []
        self.namespace_reads = 0

    # -- test controls -----------------------------------------------------------------------

    def add_secret(self, namespace: str, name: str, data: Mapping[str, bytes]) -> None:
        self.secrets[(namespace, name)] = dict(data)

    def deny_secret(self, namespace: str, name: str) -> None:
        """The operator's RBAC does not cover this Secret: reading it answers 403."""
        self.denied.add((namespace, name))

    def create(
        self, namespace: str, name: str, uid: str, spec: Mapping[str, Any], *, created: str | None = None
    ) -> FakeObject:
        obj = FakeObject(namespace, name, uid, copy.deepcopy(dict(spec)))
        if created is not None:
            obj.created = created
        self.objects[(namespace, name)] = obj
        return obj

    def edit_spec(self, namespace: str, name: str, spec: Mapping[str, Any]) -> None:
        obj = self.objects[(namespace, name)]
        obj.spec = copy.deepcopy(dict(spec))
        obj.generation += 1

    def annotate(self, namespace: str, name: str, key: str, value: str) -> None:
        """`kubectl annotate` (e.g. `kubectl taobrev cancel`: taobrev.io/cancel=<time>)."""
        self.objects[(namespace, name)].annotations[key] = value

    def request_delete(self, namespace: str, name: str) -> None:
        """`kubectl delete`: the finalizer keeps the object until teardown releases it."""
        self.objects[(namespace, name)].deletion_requested = True

    def release(self, namespace: str, name: str) -> None:
        """The finalizer is removed: the object is gone."""
        self.objects.pop((namespace, name), None)

    def get(self, namespace: str, name: str) -> FakeObject | None:
        return self.objects.get((namespace, name))

    # -- KubeAccess ------------------------------------------------------------------------------

    async def read_secret(
        self, namespace: str, name: str, *, operator_own: bool = False
    ) -> Mapping[str, bytes] | None:
        self.secret_reads += 1
        if (namespace, name) in self.denied:
            raise SecretAccessDenied(f"the operator may not read Secret {namespace}/{name} (403 Forbidden)")
        data = self.secrets.get((namespace, name))
        return None if data is None else dict(data)

    async def patch_status(self, namespace: str, name: str, status: Mapping[str, Any]) -> bool:
        obj = self.objects.get((namespace, name))
        if obj is None:
            return False
        patch = _as_json(status)
        for body in (patch, trimmed_status(patch), minimal_status(patch)):
            merged = merge_patch(obj.status, body)
            if self._refused(merged):
                self.rejected.append(body)
                continue
            obj.status = merged
            self.writes.append(StatusWrite(namespace, name, body, merged))
            return True
        raise StatusRejected(
            f"the API server refused the status of TaoBrevJob {namespace}/{name} even trimmed to a minimum"
        )

    async def namespace_uid(self, name: str) -> str:
        if name not in self.namespace_uids:
            raise KubeUnavailable(f"reading the uid of namespace {name}: 404 Not Found")
        return self.namespace_uids[name]

    async def read_config_map(self, namespace: str, name: str) -> tuple[dict[str, str], str] | None:
        if self.config_map_fails is not None:
            raise self.config_map_fails
        found = self.config_maps.get((namespace, name))
        return None if found is None else (dict(found[0]), str(found[1]))

    async def write_config_map(
        self, namespace: str, name: str, data: Mapping[str, str], resource_version: str | None
    ) -> None:
        found = self.config_maps.get((namespace, name))
        current = None if found is None else str(found[1])
        if current != resource_version:
            raise KubeUnavailable(f"writing ConfigMap {namespace}/{name}: 409 Conflict")
        # The API server's ConfigMap validation: keys + values at most 1 MiB, else 422.
        size = sum(len(k.encode()) + len(v.encode()) for k, v in data.items())
        if size > CONFIG_MAP_MAX_BYTES:
            raise KubeUnavailable(
                f"writing ConfigMap {namespace}/{name}: the API server answered 422 Unprocessable Entity: "
                f"Too long: must have at most {CONFIG_MAP_MAX_BYTES} bytes"
            )
        self.config_maps[(namespace, name)] = (dict(data), (found[1] if found else 0) + 1)

    @property
    def job_lists(self) -> int:
        """TaoBrevJob listings so far, of any selection."""
        return len(self.job_listings)

    async def list_jobs(
        self, namespaces: Sequence[str] = (), *, page_size: int = 500, finished: bool | None = None
    ) -> list[dict[str, Any]]:
        """As the API server with the CRD's selectable status.finishedAt (`finished`)."""
        self.job_listings.append(finished)
        if self.list_fails is not None:
            raise self.list_fails
        return [
            copy.deepcopy(body)
            for o in self.objects.values()
            if not namespaces or o.namespace in namespaces
            for body in (o.body(),)
            if finished is None or bool((body.get("status") or {}).get("finishedAt")) == finished
        ]

    async def map_jobs(
        self,
        each: Callable[[dict[str, Any]], T | None],
        namespaces: Sequence[str] = (),
        *,
        page_size: int = 500,
        finished: bool | None = None,
    ) -> list[T]:
        """As KubeAccess.map_jobs: `each` of every job `list_jobs` (and its faults) gives."""
        listed = await self.list_jobs(namespaces, page_size=page_size, finished=finished)
        return [v for v in map(each, listed) if v is not None]

    async def namespace_annotations(self, name: str) -> Mapping[str, str] | None:
        self.namespace_reads += 1
        if name in self.denied_namespaces:
            raise KubeAccessDenied(f"reading Namespace {name} (quota annotations): 403 Forbidden")
        return dict(self.namespaces.get(name, {}))

    def _refused(self, status: Mapping[str, Any]) -> bool:
        """422 from the CRD's maxItems: a list anywhere in the status (e.g. an attempt's
        run.logTail) longer than `max_list_items`."""
        limit = self.max_list_items
        return limit is not None and _too_long(status, limit)


def _too_long(value: Any, limit: int) -> bool:
    if isinstance(value, Mapping):
        return any(_too_long(v, limit) for v in value.values())
    if isinstance(value, list):
        return len(value) > limit or any(_too_long(v, limit) for v in value)
    return False


@dataclass(frozen=True)
class Event:
    name: str
    type: str
    reason: str
    message: str


class FakeEvents:
    """The reconciler's EventSink: keeps every Event posted."""

    def __init__(self) -> None:
        self.events: list[Event] = []

    def __call__(self, ref: Any, type_: str, reason: str, message: str) -> None:
        self.events.append(Event(ref.name, type_, reason, message))

    def reasons(self) -> list[str]:
        return [e.reason for e in self.events]
