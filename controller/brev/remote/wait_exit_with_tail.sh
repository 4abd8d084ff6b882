# shellcheck shell=bash
# wait_exit_with_tail: wait_exit.sh, then the container's State, TAO's progress and its log tail,
# in the SAME call (no extra round trip between the exit and the next step, and none for progress).
# Placeholders:
#   @seconds@        the bound of the wait
#   @name@           the container name (the job id)
#   @read_progress@  progress_section.sh, if_exited.sh around it (not while it still runs), or `:`
#   @read_tail@      tail_section.sh, or if_exited.sh around it (no tail while it still runs)
# Why: the markers __taobrev_state__, __taobrev_progress__ and __taobrev_log_tail__ separate docker
# wait's answer, the State, the status.json tail and the log tail in the output; the State is read
# only after an exit (rc 0). The program exits with the wait's code, so 124 (`timeout`) still
# means "still running".
timeout @seconds@ docker wait @name@ 2>&1; rc=$?;
echo __taobrev_state__;
if [ $rc -eq 0 ]; then docker inspect --format '{{json .State}}' @name@ 2>/dev/null; fi;
@read_progress@;
@read_tail@;
exit $rc
