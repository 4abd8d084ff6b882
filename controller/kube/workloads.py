"""Kueue's objects the operator touches (docs/kueue.md): the Workload of each Kueue-managed job
(create, read, patch its status) and WorkloadPriorityClass values. Nothing else of Kueue.

Like controller/kube/access.py: blocking client calls in worker threads, each with a request
timeout, every failure leaving as a `controller.api.errors` type. A 404 on the Workload kind
itself (Kueue's CRDs not installed) says so and names the fix.
"""

from __future__ import annotations

import asyncio
from collections.abc import Mapping
from typing import Any

from kubernetes import client as k8s
from kubernetes.client.rest import ApiException
from urllib3.exceptions import HTTPError as Urllib3Error

from controller.api.errors import KubeUnavailable
from controller.fleet.kueue import GROUP, PRIORITY_CLASSES, VERSION, WORKLOADS
from controller.kube.access import _missing_as, _translate

_NO_KUEUE = (
    "Kueue's Workload API (workloads.kueue.x-k8s.io/v1beta2) is not served: install Kueue >= v0.15 "
    "or set TAOBREV_KUEUE=false (docs/kueue.md)"
)


class WorkloadStore:
    """Workloads and WorkloadPriorityClasses through the CustomObjects API."""

    def __init__(
        self, api: k8s.ApiClient | None = None, *, request_timeout: float = 30.0, custom: Any = None
    ) -> None:
        # `custom` lets tests inject a fake CustomObjectsApi.
        self._custom = custom if custom is not None else k8s.CustomObjectsApi(api)
        self._timeout = (min(request_timeout, 10.0), request_timeout)

    async def get(self, namespace: str, name: str) -> dict[str, Any] | None:
        """The Workload, or None when there is none of that name."""
        where = f"reading Workload {namespace}/{name}"

        def _get() -> dict[str, Any] | None:
            return dict(
                self._custom.get_namespaced_custom_object(
                    GROUP, VERSION, namespace, WORKLOADS, name, _request_timeout=self._timeout
                )
            )

        return await asyncio.to_thread(_missing_as, None, _get, where)

    async def create(self, body: Mapping[str, Any]) -> dict[str, Any]:
        """Create the Workload; one that exists already (a create whose answer was lost, another
        leader) is read and returned instead."""
        meta = body["metadata"]
        namespace, name = meta["namespace"], meta["name"]
        where = f"creating Workload {namespace}/{name}"

        def _create() -> dict[str, Any] | None:
            try:
                return dict(
                    self._custom.create_namespaced_custom_object(
                        GROUP, VERSION, namespace, WORKLOADS, dict(body), _request_timeout=self._timeout
                    )
                )
            except ApiException as exc:
                if exc.status == 409:
                    return None
                if exc.status == 404:
                    raise KubeUnavailable(f"{where}: {_NO_KUEUE}") from None
                raise _translate(exc, where) from None
            except (Urllib3Error, OSError) as exc:
                raise _translate(exc, where) from None

        made = await asyncio.to_thread(_create)
        if made is not None:
            return made
        found = await self.get(namespace, name)
        if found is None:
            raise KubeUnavailable(f"{where}: it exists, then could not be read; retrying")
        return found

    async def patch_status(self, namespace: str, name: str, patch: Mapping[str, Any]) -> bool:
        """Merge-patch the Workload's status subresource. The patch carries the resourceVersion
        it was computed from: False (nothing changed) when the Workload changed since, or is gone;
        the next pass reads it again."""
        where = f"patching the status of Workload {namespace}/{name}"

        def _patch() -> bool:
            try:
                answer = self._custom.patch_namespaced_custom_object_status(
                    GROUP,
                    VERSION,
                    namespace,
                    WORKLOADS,
                    name,
                    dict(patch),
                    _request_timeout=self._timeout,
                    _preload_content=False,
                )
                answer.drain_conn()
                answer.release_conn()
            except ApiException as exc:
                if exc.status in (404, 409):
                    return False
                raise _translate(exc, where) from None
            except (Urllib3Error, OSError) as exc:
                raise _translate(exc, where) from None
            return True

        return await asyncio.to_thread(_patch)

    async def priority_class_value(self, name: str) -> int | None:
        """The value of WorkloadPriorityClass `name`, or None when there is no such class."""
        where = f"reading WorkloadPriorityClass {name}"

        def _get() -> int | None:
            got = self._custom.get_cluster_custom_object(
                GROUP, VERSION, PRIORITY_CLASSES, name, _request_timeout=self._timeout
            )
            value = got.get("value") if isinstance(got, Mapping) else None
            if not isinstance(value, int):
                raise KubeUnavailable(f"{where}: it has no integer value")
            return value

        return await asyncio.to_thread(_missing_as, None, _get, where)
