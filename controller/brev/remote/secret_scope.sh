# shellcheck shell=bash
# secret_scope: run a program that reads secret files, removing them whenever it ends.
# Placeholders:
#   @cleanup@  the EXIT trap's body, secret_cleanup.sh rendered and quoted as ONE shell word
#   @program@  the program that reads the secret files
# Why: the EXIT trap runs on success, failure and `exit`; bash does not run it when killed by a
# signal, so hang-up (the ssh connection lost), TERM (`timeout`) and INT are turned into an exit
# (with the usual 128+signal code) and the trap runs then too. The operator raises on a program
# whose output lacks TAOBREV_SECRETS_GONE, and the step runs again (delivering and removing again).
trap @cleanup@ EXIT; trap 'exit 129' HUP; trap 'exit 143' TERM; trap 'exit 130' INT;
@program@
