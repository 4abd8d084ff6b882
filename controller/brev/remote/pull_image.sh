# shellcheck shell=bash
# pull_image: ONE registry login, `docker manifest inspect` of every image, then each image pulled
# unless present (a workflow's distinct images, each once).
# Runs inside secret_scope.sh, which removes the key file and the login (@docker_config@).
# Placeholders:
#   @docker_config@  the job's DOCKER_CONFIG directory: the stored login lives there, not in ~/.docker
#   @registry@       the registry to log in to
#   @key_file@       the NGC API key file, read by --password-stdin (never on a command line)
#   @images@         the images
# Why: each step prints `TAOBREV_STEP <name>` first, so a failure is classified by the step it
# happened in (login refused: the key; manifest refused: the entitlement or a wrong image name),
# with the image after the step's name. Every manifest is inspected before any pull, so an image
# we may not pull fails before GPU time or a multi-GB pull is spent; its errors are the output
# (the manifest itself is not wanted).
export DOCKER_CONFIG=@docker_config@;
echo TAOBREV_STEP login;
docker login @registry@ --username '$oauthtoken' --password-stdin < @key_file@ 2>&1 || exit $?;
set -- @images@;
for image in "$@"; do
  echo TAOBREV_STEP manifest "$image";
  { docker manifest inspect "$image" >/dev/null; } 2>&1 || exit $?;
done;
for image in "$@"; do
  echo TAOBREV_STEP pull "$image";
  docker image inspect "$image" >/dev/null 2>&1 || docker pull "$image" 2>&1 || exit $?;
done
