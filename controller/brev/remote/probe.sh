# shellcheck shell=bash
# probe: is the instance ready? Prints "ok" once exec works end to end (RUNNING is not ssh-ready).
# Sent over the same ssh as every later step, so an "ok" proves the transport they use.
# Placeholders: none.
echo ok
