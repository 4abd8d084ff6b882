# shellcheck shell=bash
# newest_whole_checkpoint (in the job directory): newest first, print
# `TAOBREV_LATEST <epoch> <path>` for the first numbered checkpoint (`*_epoch_NNN.pth` under
# results/) that is a whole archive, and `TAOBREV_UNREADABLE <path>` for each newer one passed
# over (the resume falls back to the latest whole one).
# Placeholders:
#   @whole_zip@  whole_zip.sh rendered (tests "$p")
find results -type f -name '*_epoch_*.pth' 2>/dev/null |
  sed -n 's/^\(.*_epoch_\([0-9][0-9]*\)\.pth\)$/\2 \1/p' | sort -rn |
  while read -r e p; do
    if @whole_zip@; then echo "TAOBREV_LATEST $e $p"; break; else echo "TAOBREV_UNREADABLE $p"; fi;
  done
