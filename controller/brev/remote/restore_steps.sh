# shellcheck shell=bash
# restore_steps: before a workflow step starts on a new instance (another attempt, or
# spec.startAtStep), put back the earlier steps' results (@outputs@: restore_step_output.sh per
# step), then the step's own synced checkpoints into steps/<step>/results, and report
# `TAOBREV_RESTORED <files>` and its latest whole checkpoint (newest_whole_checkpoint.sh, run in
# steps/<step>/). Runs inside secret_scope.sh (the S3 keys file).
# Placeholders:
#   @results@                   steps/<step>/results on the instance
#   @abort_incomplete_uploads@  abort_incomplete_uploads.sh rendered (the step's checkpoint prefix)
#   @outputs@                   restore_step_output.sh rendered per earlier step, or `:`
#   @aws@                       aws.sh rendered with steps/ mounted at /job/steps
#   @checkpoints_uri@           <uri>/checkpoints/<job id>/<step>
#   @dest@                      /job/steps/<step>/results
#   @work_dir@                  steps/<step>
#   @newest_whole_checkpoint@   newest_whole_checkpoint.sh rendered
# Why: the steps whose results are verified never run again; what they wrote comes back from S3.
# Empty checkpoint prefixes restore nothing (the step starts from scratch).
mkdir -p @results@ || exit $?;
@abort_incomplete_uploads@;
@outputs@ || exit $?;
echo TAOBREV_STEP checkpoints;
@aws@ s3 sync @checkpoints_uri@ @dest@ --only-show-errors 2>&1 || exit $?;
cd @work_dir@ && echo TAOBREV_RESTORED "$(find results -type f | wc -l)" && @newest_whole_checkpoint@
