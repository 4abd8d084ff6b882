# shellcheck shell=bash
# pull_image: registry login, `docker manifest inspect`, then pull unless the image is present.
# Runs inside secret_scope.sh, which removes the key file and the login (@docker_config@).
# Placeholders:
#   @docker_config@  the job's DOCKER_CONFIG directory: the stored login lives there, not in ~/.docker
#   @registry@       the registry to log in to
#   @key_file@       the NGC API key file, read by --password-stdin (never on a command line)
#   @image@          the image
# Why: each step prints `TAOBREV_STEP <name>` first, so a failure is classified by the step it
# happened in (login refused: the key; manifest refused: the entitlement or a wrong image name).
# The manifest inspect fails before GPU time is spent on an image we may not pull; its errors are
# the output (the manifest itself is not wanted).
export DOCKER_CONFIG=@docker_config@;
echo TAOBREV_STEP login;
docker login @registry@ --username '$oauthtoken' --password-stdin < @key_file@ 2>&1 || exit $?;
echo TAOBREV_STEP manifest;
{ docker manifest inspect @image@ >/dev/null; } 2>&1 || exit $?;
echo TAOBREV_STEP pull;
docker image inspect @image@ >/dev/null 2>&1 || docker pull @image@ 2>&1
