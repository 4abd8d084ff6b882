# shellcheck shell=bash
# if_exited: a section of wait_exit_with_tail.sh's output (the log tail, the progress) only when
# the container exited, not when the wait timed out (124) with it still running.
# Placeholders:
#   @section@  tail_section.sh or progress_section.sh rendered
# rc is the wait's exit code, set by wait_exit_with_tail.sh around this fragment: not assigned
# here (SC2154), and a number, which needs no quotes (SC2086: in the rendered program, where
# rc=$? is in sight, the same test draws no finding).
# shellcheck disable=SC2154,SC2086
if [ $rc -ne 124 ]; then @section@; fi
