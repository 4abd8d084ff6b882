# shellcheck shell=bash
# sync_checkpoints: report how the previous detached checkpoint sync ended (and remove its
# container), then start the next one, detached: `aws s3 sync` of results/ copies only new or
# changed files. Runs inside secret_scope.sh (the S3 keys file: docker reads --env-file at
# `docker run`, so the keys file is not needed once the sync started).
# Placeholders:
#   @results@                   the job's results/ on the instance
#   @ckpt_dir@ @pending@        ckpt/ and ckpt/pending ("<files> <epoch>" the running sync copies)
#   @ckpt@                      the sync's container name (<job id>-ckpt)
#   @job_dir@                   the job directory
#   @whole_checkpoint_filters@  whole_checkpoint_filters.sh rendered (sets "$@" and skip)
#   @newest_whole_checkpoint@   newest_whole_checkpoint.sh rendered
#   @label@                     tao-job=<job id>
#   @s3_env@                    the S3 keys file
#   @image@                     the aws-cli image
#   @s3_options@                `--endpoint-url URL` and/or `--region R`, or none
#   @target@                    <uri>/checkpoints/<job id>
# Why: ONE short call per interval, the copy never blocks it (exit notice and teardown are never
# delayed by a sync). A running sync is left alone (TAOBREV_SYNC_RUNNING); a finished one is
# reported (TAOBREV_SYNC_PREV <status> <code>, its last log lines, what it was copying) and its
# container removed: its config carries the S3 keys. TAO's `*_latest.pth` is a symlink to the
# checkpoint being written next: never copied (as a link or as the file it names); the numbered
# checkpoints are what a resume reads, and only whole ones are copied ("$@").
mkdir -p @results@ @ckpt_dir@ || exit $?;
st=$(docker inspect --format '{{.State.Status}} {{.State.ExitCode}}' @ckpt@ 2>/dev/null);
case "$st" in running*|created*|restarting*) echo TAOBREV_SYNC_RUNNING; exit 0;; esac;
if [ -n "$st" ]; then
  echo "TAOBREV_SYNC_PREV $st";
  docker logs --tail 5 @ckpt@ 2>&1 | tail -c 2000 | sed 's/^/TAOBREV_SYNC_LOG /';
  docker rm -f @ckpt@ >/dev/null 2>&1;
  sed 's/^/TAOBREV_SYNC_PENDING /' @pending@ 2>/dev/null;
else
  echo TAOBREV_SYNC_NONE;
fi;
cd @job_dir@ || exit $?;
@whole_checkpoint_filters@;
# skip is set by whole_checkpoint_filters.sh, which the placeholder above stands for.
# shellcheck disable=SC2154
n=$(($(find results -type f | wc -l) - skip));
e=$(@newest_whole_checkpoint@ | sed -n 's/^TAOBREV_LATEST \([0-9]*\) .*/\1/p');
echo "$n ${e:--}" > @pending@;
docker run -d --name @ckpt@ --label @label@ --env-file @s3_env@ -e AWS_PAGER= \
  -v @results@:/job/results:ro @image@ @s3_options@ \
  s3 sync /job/results @target@ --only-show-errors \
  --no-follow-symlinks --exclude '*.pth' "$@" >/dev/null 2>&1 && echo TAOBREV_SYNC_STARTED
