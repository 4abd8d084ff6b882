# shellcheck shell=bash
# progress_section: the tail of TAO's status.json (one JSON line per epoch: the training's
# progress) as a section of wait_exit_with_tail.sh's output.
# Placeholders:
#   @status_json@  the job's results/<action>/status.json
#   @max_bytes@    the byte cap
# Why: one status.json line can be large (a map of KPIs), so the bytes are capped; a file TAO has
# not written yet prints nothing.
echo __taobrev_progress__; tail -c @max_bytes@ @status_json@ 2>/dev/null
