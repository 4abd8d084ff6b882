# shellcheck shell=bash
# container_state: the container's State as one JSON line (docker's error when there is none).
# Placeholders:
#   @name@  the container name (the job id)
docker inspect --format '{{json .State}}' @name@ 2>&1
