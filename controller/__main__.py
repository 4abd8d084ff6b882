"""`python -m controller` — run the operator (kopf, standalone: one replica, no peering CRDs)."""

from __future__ import annotations

import kopf

from controller import handlers  # noqa: F401 - registers the handlers
from controller.gc_pacing import pace_gc
from controller.malloc_arenas import cap_malloc_arenas
from controller.observability.logs import configure_logging
from controller.settings import Settings


def main() -> None:
    cap_malloc_arenas()  # before kopf starts any worker thread
    pace_gc()
    settings = Settings.from_env()
    configure_logging(json=settings.log_json, level=settings.log_level)
    kopf.run(
        standalone=True,
        clusterwide=not settings.namespaces,
        namespaces=settings.namespaces,
        # /healthz is served by controller.observability.health (progress-aware), not by kopf.
        liveness_endpoint=None,
    )


if __name__ == "__main__":
    main()
