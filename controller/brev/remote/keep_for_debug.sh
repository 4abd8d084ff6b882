# shellcheck shell=bash
# keep_for_debug: what stays on an instance kept for debugging (spec.debug.keepInstanceOnFailure)
# must hold no secret: remove the checkpoint sync's container (its config carries the S3 keys), the
# training container when its config carries secret env (@rm_container@), and the job's secrets
# directory (key files, env files, the registry login's DOCKER_CONFIG), then report each part:
# `TAOBREV_CLEARED <c> <f>`, 1 for a container left that must go (c) or secret files left (f).
# Placeholders:
#   @rm_containers@  the containers to remove (the checkpoint sync's, and the job's when it must go)
#   @secrets_dir@    the job's secrets directory
# Why: the job directory (spec, data, results, logs) and a stopped training container without
# secret env stay, for `brev shell` and `docker start -ai` / `docker logs`. Containers write as
# root, hence the non-interactive sudo fallback on a real VM.
docker rm -f @rm_containers@ >/dev/null 2>&1; c=0;
# One line per container still there (`docker inspect` of several names fails if any is missing).
docker inspect --format left @rm_containers@ 2>/dev/null | grep -q left && c=1;
rm -rf @secrets_dir@ 2>/dev/null || sudo -n rm -rf @secrets_dir@; f=0; test -e @secrets_dir@ && f=1;
echo TAOBREV_CLEARED $c $f
