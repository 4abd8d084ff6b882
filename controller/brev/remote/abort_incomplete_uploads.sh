# shellcheck shell=bash
# abort_incomplete_uploads: abort every incomplete multipart upload under the job's checkpoints/.
# Placeholders:
#   @aws@     aws.sh rendered
#   @bucket@  the bucket
#   @prefix@  the key prefix of the job's checkpoints, ending in /
# Why: a sync killed mid-copy (the instance lost, the container removed) leaves its parts stored,
# and billed by S3, yet in no listing; `aws s3 sync` never resumes them. Best effort: a failing
# listing or abort is not the step's failure.
{ @aws@ s3api list-multipart-uploads --bucket @bucket@ --prefix @prefix@ --query 'Uploads[].[Key,UploadId]' --output text 2>/dev/null |
  while IFS="$(printf '\t')" read -r k u; do
    if [ -n "$u" ] && [ "$k" != None ]; then
      @aws@ s3api abort-multipart-upload --bucket @bucket@ --key "$k" --upload-id "$u" >/dev/null 2>&1;
    fi;
  done; }
