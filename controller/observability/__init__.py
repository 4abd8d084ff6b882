"""Observability: Prometheus metrics (operator and per job), structured logs with redaction, and
the progress watchdog behind /healthz."""
