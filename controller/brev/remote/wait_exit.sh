# shellcheck shell=bash
# wait_exit: block up to @seconds@ for the container to exit; prints its exit code.
# Placeholders:
#   @seconds@  the bound of the wait
#   @name@     the container name (the job id)
# Why: coreutils `timeout` exits 124 when the bound is hit: the container still runs.
timeout @seconds@ docker wait @name@ 2>&1
