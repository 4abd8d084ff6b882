# shellcheck shell=bash
# tail_section_if_exited: tail_section.sh only when the container exited, not when the wait of
# wait_exit_with_tail.sh timed out (124) with it still running.
# Placeholders:
#   @tail_section@  tail_section.sh rendered
# rc is the wait's exit code, set by wait_exit_with_tail.sh around this fragment: not assigned
# here (SC2154), and a number, which needs no quotes (SC2086: in the rendered program, where
# rc=$? is in sight, the same test draws no finding).
# shellcheck disable=SC2154,SC2086
if [ $rc -ne 124 ]; then @tail_section@; fi
