# shellcheck shell=bash
# restore_step_output: copy ONE earlier workflow step's uploaded results (<uri>/<step>/) back into
# steps/<step>/results/, then print `TAOBREV_OUTPUT <step> <files>`; restore_steps.sh joins one of
# these per step with "; ". Runs inside secret_scope.sh (the S3 keys file).
# Placeholders:
#   @target@  steps/<step>/results on the instance
#   @aws@     aws.sh rendered with steps/ mounted at /job/steps
#   @uri@     <uri>/<step>
#   @dest@    /job/steps/<step>/results
#   @step@    the step's name
# Why: a later step reads these read-only (spec.steps[].inputs); the step itself never runs again.
# `TAOBREV_STEP output <step>` names the step a failure belongs to; zero files is reported, not
# failed here (the operator says which step's results are missing and how to fix it).
echo TAOBREV_STEP output @step@;
mkdir -p @target@ && @aws@ s3 sync @uri@ @dest@ --only-show-errors 2>&1 || exit $?;
printf 'TAOBREV_OUTPUT %s %s\n' @step@ "$(find @target@ -type f | wc -l)"
