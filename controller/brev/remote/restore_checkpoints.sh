# shellcheck shell=bash
# restore_checkpoints: before the container starts, copy <uri>/results (when this job uploaded
# it) and <uri>/checkpoints/<job id> into results/, then print `TAOBREV_RESTORED <files>` and the
# latest whole checkpoint (newest_whole_checkpoint.sh). Runs inside secret_scope.sh (the S3 keys).
# Empty prefixes restore nothing (not an error: training starts from scratch).
# Placeholders:
#   @results@                   the job's results/ on the instance
#   @owner_dir@ @owner_file@    owner/ and owner/job: where the owner mark is fetched to
#   @abort_incomplete_uploads@  abort_incomplete_uploads.sh rendered
#   @aws@                       aws.sh rendered with results/ and owner/ mounted
#   @owner_uri@                 <uri>/logs/taobrev-job, written by upload_results.sh
#   @job_id@                    the job id
#   @results_uri@               <uri>/results
#   @checkpoints_uri@           <uri>/checkpoints/<job id>
#   @job_dir@                   the job directory
#   @newest_whole_checkpoint@   newest_whole_checkpoint.sh rendered
# Why: results/ holds what an earlier attempt uploaded when it exited with a retried code, but
# only if its owner mark names this job: another job's results under a reused resultsUri are no
# checkpoint of this run. checkpoints/<job id>/ is what this job's periodic sync copied. Either
# may be the newer. The parts a killed sync left are aborted first (they are billed).
mkdir -p @results@ @owner_dir@ || exit $?;
@abort_incomplete_uploads@;
@aws@ s3 cp @owner_uri@ /job/owner/job --only-show-errors >/dev/null 2>&1;
if [ "$(cat @owner_file@ 2>/dev/null)" = @job_id@ ]; then
  @aws@ s3 sync @results_uri@ /job/results --only-show-errors 2>&1 || exit $?;
fi;
rm -rf @owner_dir@;
@aws@ s3 sync @checkpoints_uri@ /job/results --only-show-errors 2>&1 || exit $?;
cd @job_dir@ && echo TAOBREV_RESTORED "$(find results -type f | wc -l)" && @newest_whole_checkpoint@
