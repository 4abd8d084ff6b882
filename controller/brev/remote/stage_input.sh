# shellcheck shell=bash
# stage_input: copy ONE S3 prefix (recursively) to data/<path>; stage_inputs joins one of these per
# input with "; " into a single program, inside secret_scope.sh (the S3 keys file).
# Placeholders:
#   @step@    the input's index (spec.inputs[i])
#   @target@  data/<path> on the instance
#   @aws@     aws.sh rendered with data/ mounted at /job/data
#   @uri@     the S3 prefix
#   @dest@    /job/data/<path>, where @target@ is in the aws-cli container
# Why: `TAOBREV_STEP <i>` names the input a failure belongs to; `TAOBREV_STAGED <i> <files>`
# reports how many files it copied (a prefix holding no objects is a spec error).
echo TAOBREV_STEP @step@;
mkdir -p @target@ && @aws@ s3 cp @uri@ @dest@ --recursive --only-show-errors 2>&1 || exit $?;
printf 'TAOBREV_STAGED @step@ %s\n' "$(find @target@ -type f | wc -l)"
