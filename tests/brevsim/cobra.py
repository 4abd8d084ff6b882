"""Just enough of cobra/pflag to reproduce brev's argument handling and messages.

pflag semantics reproduced: flags may appear anywhere (interspersed); `--` ends flag parsing;
`--f=v`, `--f v`, `-abc` shorthand groups, `-nVALUE`; a non-bool flag takes the next argument
whatever it looks like; unknown flags give `unknown flag: --x` / `unknown shorthand flag: 'l' in -la`.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any

from tests.brevsim.goerr import CLIError


@dataclass(frozen=True)
class Flag:
    long: str
    short: str = ""
    kind: str = "bool"  # bool | string | int | float
    default: Any = None
    usage: str = ""
    hidden: bool = False

    @property
    def initial(self) -> Any:
        if self.default is not None:
            return self.default
        return {"bool": False, "string": "", "int": 0, "float": 0.0}[self.kind]


HELP = Flag("help", "h", "bool", usage="help")
ROOT_FLAGS = (
    Flag(
        "user", "", "string", usage="non root user to use for per user configuration of commands run as root"
    ),
    Flag("version", "", "bool", usage="Print version output"),
    Flag("no-check-latest", "", "bool", usage="Do not check for the latest version when printing version"),
)


@dataclass
class Parsed:
    values: dict[str, Any] = field(default_factory=dict)
    args: list[str] = field(default_factory=list)
    changed: set[str] = field(default_factory=set)

    def __getitem__(self, key: str) -> Any:
        return self.values[key]


def _convert(flag: Flag, raw: str) -> Any:
    name = f"-{flag.short}, --{flag.long}" if flag.short else f"--{flag.long}"
    try:
        if flag.kind == "int":
            return int(raw, 10)
        if flag.kind == "float":
            return float(raw)
        if flag.kind == "bool":
            lowered = raw.lower()
            if lowered in ("1", "t", "true"):
                return True
            if lowered in ("0", "f", "false"):
                return False
            raise ValueError(raw)
    except ValueError:
        fn = {"int": "ParseInt", "float": "ParseFloat", "bool": "ParseBool"}[flag.kind]
        raise CLIError(
            f'invalid argument "{raw}" for "{name}" flag: strconv.{fn}: parsing "{raw}": invalid syntax'
        ) from None
    return raw


def parse(argv: list[str], flags: tuple[Flag, ...]) -> Parsed:
    all_flags = (*flags, *ROOT_FLAGS, HELP)
    by_long = {f.long: f for f in all_flags}
    by_short = {f.short: f for f in all_flags if f.short}
    out = Parsed(values={f.long: f.initial for f in all_flags})
    i = 0
    while i < len(argv):
        a = argv[i]
        i += 1
        if a == "--":
            out.args.extend(argv[i:])
            break
        if a.startswith("--"):
            name, eq, val = a[2:].partition("=")
            flag = by_long.get(name)
            if flag is None:
                raise CLIError(f"unknown flag: --{name}")
            if flag.kind == "bool":
                out.values[name] = _convert(flag, val) if eq else True
            elif eq:
                out.values[name] = _convert(flag, val)
            elif i < len(argv):
                out.values[name] = _convert(flag, argv[i])
                i += 1
            else:
                raise CLIError(f"flag needs an argument: --{name}")
            out.changed.add(name)
        elif a.startswith("-") and len(a) > 1:
            shorts = a[1:]
            j = 0
            while j < len(shorts):
                c = shorts[j]
                flag = by_short.get(c)
                if flag is None:
                    raise CLIError(f"unknown shorthand flag: '{c}' in -{shorts}")
                rest = shorts[j + 1 :]
                if flag.kind == "bool":
                    if rest.startswith("="):
                        out.values[flag.long] = _convert(flag, rest[1:])
                        j = len(shorts)
                    else:
                        out.values[flag.long] = True
                        j += 1
                else:
                    if rest:
                        out.values[flag.long] = _convert(flag, rest.removeprefix("="))
                    elif i < len(argv):
                        out.values[flag.long] = _convert(flag, argv[i])
                        i += 1
                    else:
                        raise CLIError(f"flag needs an argument: '{c}' in -{c}")
                    j = len(shorts)
                out.changed.add(flag.long)
        else:
            out.args.append(a)
    return out


def find_command(argv: list[str]) -> tuple[str | None, int]:
    """cobra's Find: the first argument that is neither a flag nor a root flag's value."""
    i = 0
    while i < len(argv):
        a = argv[i]
        if a == "--":
            return None, -1
        if a in ("--user",):
            i += 2
            continue
        if a.startswith("-") and len(a) > 1:
            i += 1
            continue
        return a, i
    return None, -1


def levenshtein(a: str, b: str) -> int:
    prev = list(range(len(b) + 1))
    for i, ca in enumerate(a, 1):
        cur = [i]
        for j, cb in enumerate(b, 1):
            cur.append(min(prev[j] + 1, cur[j - 1] + 1, prev[j - 1] + (ca != cb)))
        prev = cur
    return prev[-1]


def unknown_command(name: str, root: str, commands: list[str]) -> CLIError:
    suggestions = [c for c in commands if levenshtein(name.lower(), c.lower()) <= 2 or c.startswith(name)]
    text = f'unknown command "{name}" for "{root}"'
    if suggestions:
        text += "\n\nDid you mean this?\n" + "".join(f"\t{s}\n" for s in suggestions)
    return CLIError(text)


def flag_usages(flags: tuple[Flag, ...]) -> str:
    """pflag's FlagUsages layout: `  -n, --name string   usage (default x)`."""
    rows: list[tuple[str, str]] = []
    for f in sorted(flags, key=lambda f: f.long):
        if f.hidden:
            continue
        left = f"  -{f.short}, --{f.long}" if f.short else f"      --{f.long}"
        if f.kind != "bool":
            left += " " + {"string": "string", "int": "int", "float": "float"}[f.kind]
        usage = f.usage
        if f.default not in (None, "", 0, False) and f.kind != "bool":
            usage += f" (default {f.default!s})" if f.kind != "string" else f' (default "{f.default}")'
        elif f.kind == "bool" and f.default is True:
            usage += " (default true)"
        rows.append((left, usage))
    width = max((len(left) for left, _ in rows), default=0)
    return "".join(f"{left.ljust(width)}   {usage}\n" for left, usage in rows)


def help_text(use: str, short: str, flags: tuple[Flag, ...], aliases: tuple[str, ...] = ()) -> str:
    text = f"{short}\n\nUsage:\n  brev {use}\n"
    if aliases:
        text += "\nAliases:\n  " + ", ".join(aliases) + "\n"
    text += "\nFlags:\n" + flag_usages(
        (*flags, Flag("help", "h", "bool", usage=f"help for {use.split(maxsplit=1)[0]}"))
    )
    text += "\nGlobal Flags:\n" + flag_usages(ROOT_FLAGS)
    return text
