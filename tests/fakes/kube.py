"""Kubernetes as the reconciler sees it: Secrets to read, TaoBrevJob objects whose status is
merge-patched (RFC 7386, as the API server applies `patch_namespaced_custom_object_status`), a
finalizer that holds deletion until teardown is done, and Events.

`patch_status` answers like the real `KubeAccess`: False (404) once the object is gone; with
`max_list_items` set, a status holding a longer list is refused with 422 as the CRD's maxItems
would be.
"""

from __future__ import annotations

import copy
import json
from collections.abc import Mapping
from dataclasses import dataclass, field
from typing import Any

from kubernetes.client.rest import ApiException

from controller.kube import KubeAccess


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

    def body(self) -> dict[str, Any]:
        meta: dict[str, Any] = {
            "namespace": self.namespace,
            "name": self.name,
            "uid": self.uid,
            "generation": self.generation,
            "finalizers": ["taobrev.io/teardown"],
        }
        if self.deletion_requested:
            meta["deletionTimestamp"] = "2026-11-29T12:00:00Z"
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
        self.objects: dict[tuple[str, str], FakeObject] = {}
        self.writes: list[StatusWrite] = []
        self.rejected: list[dict[str, Any]] = []
        self.secret_reads = 0
        self.max_list_items = max_list_items

    # -- test controls -----------------------------------------------------------------------

    def add_secret(self, namespace: str, name: str, data: Mapping[str, bytes]) -> None:
        self.secrets[(namespace, name)] = dict(data)

    def create(self, namespace: str, name: str, uid: str, spec: Mapping[str, Any]) -> FakeObject:
        obj = FakeObject(namespace, name, uid, copy.deepcopy(dict(spec)))
        self.objects[(namespace, name)] = obj
        return obj

    def edit_spec(self, namespace: str, name: str, spec: Mapping[str, Any]) -> None:
        obj = self.objects[(namespace, name)]
        obj.spec = copy.deepcopy(dict(spec))
        obj.generation += 1

    def request_delete(self, namespace: str, name: str) -> None:
        """`kubectl delete`: the finalizer keeps the object until teardown releases it."""
        self.objects[(namespace, name)].deletion_requested = True

    def release(self, namespace: str, name: str) -> None:
        """The finalizer is removed: the object is gone."""
        self.objects.pop((namespace, name), None)

    def get(self, namespace: str, name: str) -> FakeObject | None:
        return self.objects.get((namespace, name))

    # -- KubeAccess ------------------------------------------------------------------------------

    async def read_secret(self, namespace: str, name: str) -> Mapping[str, bytes] | None:
        self.secret_reads += 1
        data = self.secrets.get((namespace, name))
        return None if data is None else dict(data)

    async def patch_status(self, namespace: str, name: str, status: Mapping[str, Any]) -> bool:
        obj = self.objects.get((namespace, name))
        if obj is None:
            return False
        patch = _as_json(status)
        merged = merge_patch(obj.status, patch)
        if self.max_list_items is not None:
            for key, value in merged.items():
                if isinstance(value, list) and len(value) > self.max_list_items:
                    self.rejected.append(patch)
                    raise ApiException(
                        status=422,
                        reason=f"Unprocessable Entity: status.{key}: Too many: {len(value)}: "
                        f"must have at most {self.max_list_items} items",
                    )
        obj.status = merged
        self.writes.append(StatusWrite(namespace, name, patch, merged))
        return True


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
