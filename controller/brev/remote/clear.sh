# shellcheck shell=bash
# clear: remove the job's containers (the checkpoint sync's too) and the job directory (with any
# secret file an interrupted step left), then report each part: `TAOBREV_CLEARED <c> <f>`, 1 for
# a container left (c) or files left (f).
# Placeholders:
#   @names@    the job's containers: its own (or each workflow step's) and their checkpoint syncs
#   @job_dir@  the job directory
# Why: one call, because it is the teardown's last before `brev delete` and every call there is
# billed time. Containers write results as root, hence the non-interactive sudo fallback on a
# real VM.
set -- @names@;
docker rm -f "$@" >/dev/null 2>&1; c=0;
# All must be gone: the checkpoint sync containers' configs carry the S3 keys.
for n in "$@"; do docker inspect "$n" >/dev/null 2>&1 && c=1; done;
rm -rf @job_dir@ 2>/dev/null || sudo -n rm -rf @job_dir@; f=0; test -e @job_dir@ && f=1;
echo TAOBREV_CLEARED $c $f
