"""What status keeps of long text (PURE): messages clipped, the container log tail cleaned and
capped."""

from __future__ import annotations

from collections.abc import Sequence

MAX_MESSAGE = 800
# status.attempts[].run.logTail: the CRD allows 20 items; lines and the whole field are capped too, so a
# progress bar or a multi-megabyte line can never make a status patch too large.
MAX_LOG_LINES = 20
MAX_LOG_LINE = 512
MAX_LOG_BYTES = 8192


def clip(text: str, limit: int = MAX_MESSAGE) -> str:
    """Keep status readable: brev's errors carry trace fragments; the head says what failed and
    the tail says why, so keep both."""
    if len(text) <= limit:
        return text
    head = limit // 3
    return f"{text[:head]} … {text[-(limit - head - 3) :]}"


def log_lines(tail: Sequence[str]) -> list[str]:
    """The container log tail as status keeps it: a `\\r`-redrawn line (tqdm) shows only what the
    terminal would show (its last non-empty segment); each line, the count and the total capped."""
    lines: list[str] = []
    for chunk in tail:
        for raw in chunk.split("\n"):
            segments = [seg for seg in raw.split("\r") if seg.strip()]
            if not segments:
                continue
            line = segments[-1].rstrip()
            if len(line) > MAX_LOG_LINE:
                line = line[: MAX_LOG_LINE - 1] + "…"
            lines.append(line)
    lines = lines[-MAX_LOG_LINES:]
    while lines and sum(len(line.encode()) for line in lines) > MAX_LOG_BYTES:
        lines.pop(0)
    return lines
