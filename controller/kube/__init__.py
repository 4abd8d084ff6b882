"""Kubernetes I/O: Secrets, status patches and listings, the bodies kopf hands us, and the wait for
a Secret that has not arrived yet."""
