# shellcheck shell=bash
# logs: the container's log tail.
# Placeholders:
#   @log_tail@  log_tail.sh rendered
# Why: pipefail makes docker's failure (no such container) the program's exit code, not tail's 0.
set -o pipefail; @log_tail@
