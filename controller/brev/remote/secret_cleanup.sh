# shellcheck shell=bash
# secret_cleanup: remove secret files, then say whether they are gone (the body of secret_scope's
# EXIT trap).
# Placeholders:
#   @files@  each secret path followed by its `<path>.tmp-*` pattern: the temporary files of a
#            `put_file` delivery cut short go too
# Why: TAOBREV_SECRETS_GONE is printed only when `ls` finds none of them left (a file rm could
# not remove prints TAOBREV_SECRETS_LEFT); the operator reads the marker, not rm's exit code.
rm -rf -- @files@;
if test -z "$(ls -d -- @files@ 2>/dev/null)"; then
  echo TAOBREV_SECRETS_GONE;
else
  echo TAOBREV_SECRETS_LEFT;
fi
