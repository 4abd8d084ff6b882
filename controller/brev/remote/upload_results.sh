# shellcheck shell=bash
# upload_results: save `docker logs --timestamps` to logs/container.log (the log API serves
# it, with or without the times), copy results/ and logs/ to <uri>/results and <uri>/logs,
# then list the bucket to verify them. Runs inside secret_scope.sh (the S3 keys file).
# Placeholders:
#   @ckpt@                      the checkpoint sync's container
#   @abort_incomplete_uploads@  abort_incomplete_uploads.sh rendered
#   @results@ @logs@            the job's results/ and logs/ on the instance
#   @name@                      the container name (the job id)
#   @tmp_log@ @log@             logs/container.log.tmp and logs/container.log
#   @owner_mark@                logs/taobrev-job: the job id, uploaded as the owner of <uri>/results
#   @aws_mounted@               aws.sh rendered with results/ and logs/ mounted read-only
#   @results_uri@ @logs_uri@    <uri>/results and <uri>/logs
#   @job_dir@                   the job directory
#   @aws@                       aws.sh rendered without mounts
#   @bucket@                    the bucket
#   @prefix_option@             `--prefix <key prefix>/`, or none (results at the bucket's top)
# Why: a checkpoint sync still copying is ended first: this upload copies everything, and the
# parts a killed sync left are aborted (the next attempt's restore does the same). The log goes
# through a temporary file so a failed `docker logs` never replaces a saved one. The owner mark
# lets a restore tell this job's results from another job's under a reused resultsUri. Steps:
# `TAOBREV_STEP upload`, then `TAOBREV_STEP verify` (local `F<tab>size<tab>path` lines,
# TAOBREV_LISTING, the bucket's [key, size] JSON), so a failure is told by the step it was in.
echo TAOBREV_STEP upload;
docker rm -f @ckpt@ >/dev/null 2>&1;
@abort_incomplete_uploads@;
mkdir -p @results@ @logs@ &&
  { docker logs --timestamps @name@ > @tmp_log@ 2>&1 && mv -f @tmp_log@ @log@ || rm -f @tmp_log@; } &&
  echo @name@ > @owner_mark@ &&
  @aws_mounted@ s3 cp /job/results @results_uri@ --recursive --only-show-errors 2>&1 &&
  @aws_mounted@ s3 cp /job/logs @logs_uri@ --recursive --only-show-errors 2>&1 || exit $?;
echo TAOBREV_STEP verify;
cd @job_dir@ && find results logs -type f -printf 'F\t%s\t%p\n' && echo TAOBREV_LISTING &&
  @aws@ s3api list-objects-v2 --bucket @bucket@ @prefix_option@ --query 'Contents[].[Key,Size]' --output json
