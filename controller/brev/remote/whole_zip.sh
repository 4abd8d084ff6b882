# shellcheck shell=bash
# whole_zip: a test that "$p" is a whole zip archive, as torch.save writes a `.pth`.
# Placeholders: none.
# Why: the end-of-central-directory record (no comment) is the last 22 bytes of a zip, written
# last. A file TAO is still writing, or a copy cut short, ends in tensor data; the record
# anywhere else (a stricter test than "in the last 64 KiB") is a 2^-32 accident.
# p is the checkpoint path, set by the loop of the program that includes this test.
# shellcheck disable=SC2154
[ "$(tail -c 22 "$p" | head -c 4 | od -An -tx1 | tr -d ' \n')" = 504b0506 ]
