"""Go/brev error text: `breverrors.WrapAndTrace` prefixes, hashicorp multierror, cobra messages.

The real CLI prints `errors.Cause(err)`; when the cause is a `fmt.Errorf(... %w ...)` or a
multierror, the inner trace fragments end up in the printed text (SIM-CONTRACT.md section 2).
"""

from __future__ import annotations

MODULE = "github.com/brevdev/brev-cli"


def trace(func: str, file: str, line: int) -> str:
    """The text `breverrors.WrapAndTrace` adds in front of a wrapped error's message."""
    return f"[error] \n{MODULE}/{func}\n{MODULE}/{file}:{line}\n: "


def multierror(errors: list[str]) -> str:
    points = "\n\t".join(f"* {e}" for e in errors)
    if len(errors) == 1:
        return f"1 error occurred:\n\t{points}\n\n"
    return f"{len(errors)} errors occurred:\n\t{points}\n\n"


class CLIError(Exception):
    """An error the CLI prints (its Cause text) to stderr before exiting 1."""

    def __init__(self, text: str) -> None:
        super().__init__(text)
        self.text = text


GO_PANIC = (
    "panic: runtime error: invalid memory address or nil pointer dereference\n"
    "[signal SIGSEGV: segmentation violation code=0x1 addr=0x0 pc=0x10a3b2e]\n\n"
    "goroutine 1 [running]:\n"
    f"{MODULE}/pkg/cmd/util.IsStdinPiped(...)\n"
    f"\t{MODULE}/pkg/cmd/util/piping.go:18\n"
)
