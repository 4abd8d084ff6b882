"""The training log's tail as a status can hold it (PURE)."""

from __future__ import annotations

# What a status can hold of the training log (the CRD allows 20 items), and how much of the
# remote log may cross ssh to produce it: a multi-megabyte line must not travel in full.
TAIL_LINES = 20
TAIL_LINE_CHARS = 512
TAIL_MAX_BYTES = 65536
LINE_CUT = " …[cut]"


def clean_log_tail(
    text: str,
    *,
    lines: int = TAIL_LINES,
    width: int = TAIL_LINE_CHARS,
    head_cut: bool = False,
) -> list[str]:
    """The last `lines` log lines as a status can hold them. Real `docker logs --tail` counts
    `\\n` only, so a tqdm bar's `\\r` redraws arrive as ONE line: each line keeps its last
    non-blank `\\r` segment (what a terminal shows), and is cut to `width` characters, ending in
    `LINE_CUT`. `head_cut` marks a first line whose start the remote byte cap dropped."""
    raw_lines = text.split("\n")
    if raw_lines and raw_lines[-1] == "":
        raw_lines.pop()  # the terminating newline, not an empty last line
    cleaned: list[str] = []
    for i, raw in enumerate(raw_lines):
        segments = raw.split("\r")
        shown = max((n for n, segment in enumerate(segments) if segment.strip()), default=0)
        line = segments[shown] if segments[shown].strip() else ""
        if i == 0 and head_cut and shown == 0 and line:
            # Only the first segment of the first line can have lost its start to the byte cap.
            line = LINE_CUT.strip() + " " + line
        if len(line) > width:
            line = line[: width - len(LINE_CUT)] + LINE_CUT
        cleaned.append(line)
    return cleaned[-lines:] if lines > 0 else []
