"""Checks before anything bills: the pre-flight (Secrets, S3, inputs, the instance catalog, the
image) and the plan written for `spec.dryRun`."""
