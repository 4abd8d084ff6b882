# shellcheck shell=bash
# whole_checkpoint_filters (in the job directory): set "$@" to `--include <path>` for every whole
# `.pth` under results/ and `skip` to how many are left out (not whole yet, or `*_latest.pth`).
# Placeholders:
#   @whole_zip@  whole_zip.sh rendered (tests "$p")
# Why: TAO writes checkpoints in place, so one still being written is cut short. The sync runs
# with `--exclude '*.pth' "$@"`: a checkpoint begun after this look is excluded too, and a
# skipped one is copied by the next interval's sync once TAO finished it (issue 25, scenario 11).
# skip is read by the program that includes this fragment (sync_checkpoints.sh).
set --; skip=0;
while IFS= read -r p; do
  case "$p" in *_latest.pth) skip=$((skip + 1)); continue;; esac;
  if @whole_zip@; then
    # aws matches filters as fnmatch patterns: a [, * or ? in a name matches only itself.
    set -- "$@" --include "$(printf '%s' "${p#results/}" | sed 's/[][*?]/[&]/g')";
  else
    skip=$((skip + 1));
  fi;
done < <(find results -type f -name '*.pth' 2>/dev/null)
