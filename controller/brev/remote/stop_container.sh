# shellcheck shell=bash
# stop_container: SIGTERM, then SIGKILL after @grace@ seconds; bounded on the instance.
# Placeholders:
#   @limit@  the bound of the whole stop: the grace plus 10 s for docker's SIGKILL step and the
#            exit that follows it
#   @grace@  docker stop's grace period
#   @name@   the container name (the job id)
# Why: `timeout` ends a hung docker (exit 124; -k 5: KILL if it ignores the TERM), so a stop
# always ends with an answer.
timeout -k 5 @limit@ docker stop -t @grace@ @name@ 2>&1
