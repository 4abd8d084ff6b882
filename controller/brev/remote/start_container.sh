# shellcheck shell=bash
# start_container: `docker run -d` the TAO container unless one of that name exists. Runs inside
# secret_scope.sh, which removes the secret env file once docker has read it.
# Placeholders:
#   @spec@ @data@ @results@ @logs@  the job's directories on the instance
#   @name@          the container name (the job id)
#   @label@         tao-job=<job id>
#   @gpus@          all, or a count
#   @shm@           `--shm-size SIZE`, or none (docker's 64 MB default)
#   @spec_dir@ @data_dir@ @results_dir@  where the directories are mounted in the container
#   @env_file@      `--env-file <secret env file>`, or none
#   @env@           `-e K=V` pairs of the non-secret env, or none
#   @image@         the image
#   @network_arch@ @action@  TAO's entry point and subcommand
#   @spec_path@     the spec file in the container
#   @args@          extra TAO arguments, or none
#   @inputs@        a workflow step's `-v <earlier step's results>:<inputs path>:ro` words, or none
# Why: the existence check makes a repeated start (the transport may run a command twice) start
# nothing; `--pull never` and the image check: the registry login is gone by now, so docker must
# not try to pull (TAOBREV_IMAGE_MISSING, exit 3: the operator pulls with credentials, then starts
# again). umask 077: the job directories made here are the owner's alone.
umask 077 && mkdir -p @spec@ @data@ @results@ @logs@ || exit $?;
if docker inspect @name@ >/dev/null 2>&1; then
  echo TAOBREV_CONTAINER_EXISTS;
elif ! docker image inspect @image@ >/dev/null 2>&1; then
  echo TAOBREV_IMAGE_MISSING; exit 3;
else
  docker run -d --pull never --name @name@ --label @label@ --gpus @gpus@ @shm@ \
    -v @spec@:@spec_dir@:ro -v @data@:@data_dir@ -v @results@:@results_dir@ @inputs@ @env_file@ @env@ \
    @image@ @network_arch@ @action@ -e @spec_path@ results_dir=@results_dir@ @args@ 2>&1;
fi
