# shellcheck shell=bash
# aws: the start of an aws-cli command, run in the pinned aws-cli image (docker is the only tool
# an instance is sure to have); the including program appends the aws subcommand and its options.
# Placeholders:
#   @s3_env@      the S3 keys file (docker reads it as --env-file; the keys never appear in a program)
#   @mounts@      `-v host:container` pairs, or none
#   @image@       the aws-cli image
#   @s3_options@  `--endpoint-url URL` and/or `--region R`, or none
# Why: AWS_PAGER= because aws-cli v2 would otherwise try to page its output through `less`.
docker run --rm --env-file @s3_env@ -e AWS_PAGER= @mounts@ @image@ @s3_options@
