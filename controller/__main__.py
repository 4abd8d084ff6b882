"""`python -m controller` — run the operator (kopf, standalone: one replica, no peering CRDs)."""

from __future__ import annotations

import os

import kopf

from controller import handlers  # noqa: F401 - registers the handlers
from controller.logs import configure_logging
from controller.settings import Settings


def main() -> None:
    settings = Settings.from_env()
    configure_logging(json=settings.log_json, level=settings.log_level)
    liveness = os.environ.get("TAOBREV_LIVENESS_ENDPOINT", "http://0.0.0.0:8080/healthz")
    kopf.run(
        standalone=True,
        clusterwide=not settings.namespaces,
        namespaces=settings.namespaces,
        liveness_endpoint=liveness or None,
    )


if __name__ == "__main__":
    main()
