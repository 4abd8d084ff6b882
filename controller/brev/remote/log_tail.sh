# shellcheck shell=bash
# log_tail: the last @lines@ lines the container printed (stdout and stderr), at most
# @max_bytes@ bytes.
# Placeholders:
#   @lines@      how many lines
#   @name@       the container name (the job id)
#   @max_bytes@  the byte cap
# Why: `--tail` counts "\n" only: the bytes are capped too, so one huge line never crosses ssh
# whole.
docker logs --tail @lines@ @name@ 2>&1 | tail -c @max_bytes@
