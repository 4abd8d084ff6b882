# shellcheck shell=bash
# tail_section: the log tail section of wait_exit_with_tail.sh's output.
# Placeholders:
#   @log_tail@  log_tail.sh rendered
echo __taobrev_log_tail__; @log_tail@
