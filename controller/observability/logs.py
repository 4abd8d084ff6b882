"""Logging: structlog for our lines, the same format and redaction for stdlib (kopf) lines.

`configure_logging()` installs one root handler whose `structlog.stdlib.ProcessorFormatter`
renders both structlog events and foreign stdlib records (kopf logs through stdlib) as JSON (in
the cluster / not a TTY) or console text (on a terminal). Redaction runs last before rendering,
so it sees the final text of every field, tracebacks included.

Redaction masks
  (a) every value registered at runtime with `register_secret()` (the operator registers each
      Secret value it reads), wherever it appears;
  (b) things that look like credentials even when nobody registered them: values of keys named
      like password/secret/token/api_key/authorization/credential, NGC keys (nvapi-...), Brev API
      keys (bak-...), AWS access key ids and 40-character secret keys next to their key name,
      JWTs, `Bearer xyz`, and `--password xyz` / `--token=xyz` / `login ... -p xyz` argv pairs.

`redact_text()` is the ONE redaction step of the operator, applied at every sink rather than by
callers: log lines (here), Events and kopf's TemporaryError text (handlers.py), every status string
(kube.patch_status), metric label values (metrics.RedactingRegistry). kopf posts what its object
loggers log as Kubernetes Events; `configure_logging()` also puts a redacting filter on the
`kopf.objects` logger so those Events are masked too.
"""

from __future__ import annotations

import functools
import logging
import os
import re
import sys
import threading
from collections.abc import Callable, Mapping
from typing import Any, Final, TextIO

import structlog
from structlog.typing import EventDict, Processor, WrappedLogger

MASK: Final = "***"
# Shorter registered values would mask ordinary words and digits all over the logs.
MIN_SECRET_LENGTH: Final = 4

_SENSITIVE_WORDS = r"(?:password|passwd|secret|token|api[_-]?key|apikey|authorization|credential)"
_SENSITIVE_KEY = re.compile(_SENSITIVE_WORDS, re.IGNORECASE)
# Keys that merely NAME or LOCATE a secret (secretName, tokenPath, secretKeyRef, the spec's
# accessKeyIdKey/secretAccessKeyKey holding a key name) keep their values: those are what a
# user needs to read to fix a reference.
_REFERENCE_KEY = re.compile(r"(?:name|names|ref|path|file|dir|keykey|seconds|type|kind)$", re.IGNORECASE)

# key=value / key: value / "key": "value" with a sensitive key. Anchored at the start of a word
# (lookbehind) and checked for the sensitive word by a lookahead that stays inside that word, so a
# long run of word characters (a multi-megabyte log line) costs linear time, not cubic.
_KEY_VALUE = re.compile(
    r"""(?<![A-Za-z0-9_.-])(?=[A-Za-z0-9_.-]*?"""
    + _SENSITIVE_WORDS
    + r""")(?P<key>[A-Za-z0-9_.-]+)
        (?P<sep>["']?[ \t]*[:=][ \t]*)
        (?![{\[])(?P<value>"[^"\n]*"|'[^'\n]*'|[^\s,;&"'}\])]+)""",
    re.IGNORECASE | re.VERBOSE,
)
# --password xyz, --api-key=xyz, --token xyz (brev login --token, docker login --password ...).
_FLAG_VALUE = re.compile(
    r"(?<![A-Za-z0-9-])(?=--[A-Za-z0-9-]*?"
    + _SENSITIVE_WORDS.replace("_", "-")
    + r")(?P<flag>--[A-Za-z0-9-]+)(?P<sep>=|[ \t]+)"
    r"(?P<value>[^\s\"']+|\"[^\"]*\"|'[^']*')",
    re.IGNORECASE,
)
# `-p` is a password only after `login` (docker/helm/podman login -u $oauthtoken -p KEY); elsewhere
# it is a port (ssh -p 22) or "parents" (mkdir -p /workspace), which must stay readable.
_LOGIN_SHORT_P = re.compile(r"(?P<head>\blogin\b[^\n]*?[ \t]-p(?:=|[ \t]+))(?P<value>[^\s\"']+)")
_PATTERNS: Final[tuple[tuple[re.Pattern[str], str], ...]] = (
    # Authorization schemes first, so "Authorization: Bearer x" loses x before the key rule runs.
    (
        re.compile(r"\b(?P<scheme>Bearer|Basic)[ \t]+[A-Za-z0-9._~+/=-]{6,}", re.IGNORECASE),
        r"\g<scheme> " + MASK,
    ),
    (re.compile(r"\beyJ[A-Za-z0-9_-]{5,}\.eyJ[A-Za-z0-9_-]{5,}\.[A-Za-z0-9_-]*"), MASK),
    (re.compile(r"\bnvapi-[A-Za-z0-9_-]{16,}"), "nvapi-" + MASK),
    # A run of 16+ characters without a hyphen after bak-, so instance names like
    # "bak-visual-changenet-01" stay readable.
    (re.compile(r"\bbak-[A-Za-z0-9_]{16,}[A-Za-z0-9_-]*"), "bak-" + MASK),
    (re.compile(r"\b(?P<prefix>AKIA|ASIA)[A-Z0-9]{16}\b"), r"\g<prefix>" + MASK),
    # AWS secret access keys are 40 base64 characters; alone they are indistinguishable from a
    # hash, so only mask them next to their key name (any separator, e.g. `aws configure set`).
    (
        re.compile(
            r"(?P<head>secret[_-]?access[_-]?key(?!key)[A-Za-z0-9_-]*[\"']?[ \t]*(?:[:=][ \t]*|[ \t]+)[\"']?)"
            r"[A-Za-z0-9/+]{40}(?![A-Za-z0-9/+])",
            re.IGNORECASE,
        ),
        r"\g<head>" + MASK,
    ),
    (_LOGIN_SHORT_P, r"\g<head>" + MASK),
)

# Process-wide on purpose: every logger, handler and Event text in the process must mask them.
_registered: frozenset[str] = frozenset()
_registered_re: re.Pattern[str] | None = None
_register_lock = threading.Lock()


def register_secret(value: str | bytes | None) -> None:
    """Mask `value` in every log line, Event text redacted with `redact_text`, from now on."""
    global _registered, _registered_re
    if isinstance(value, bytes):
        value = value.decode("utf-8", errors="replace")
    if not value:
        return
    candidates = {value, value.strip()}
    with _register_lock:
        new = _registered | {c for c in candidates if len(c) >= MIN_SECRET_LENGTH}
        if new == _registered:
            return
        # Longest first, so a secret containing another is masked whole.
        alternation = "|".join(re.escape(s) for s in sorted(new, key=len, reverse=True))
        _registered, _registered_re = frozenset(new), re.compile(alternation)


def forget_registered_secrets() -> None:
    """Drop every registered value (tests; a process never needs to un-mask a secret)."""
    global _registered, _registered_re
    with _register_lock:
        _registered, _registered_re = frozenset(), None


def _is_sensitive_key(key: str) -> bool:
    return bool(_SENSITIVE_KEY.search(key)) and not _REFERENCE_KEY.search(key)


def _mask_quoted(value: str) -> str:
    if len(value) >= 2 and value[0] == value[-1] and value[0] in "\"'":
        return value[0] + MASK + value[0]
    return MASK


def _key_value_sub(match: re.Match[str]) -> str:
    if not _is_sensitive_key(match["key"]) or match["value"].strip("\"'") == MASK:
        return match[0]
    return match["key"] + match["sep"] + _mask_quoted(match["value"])


def _flag_value_sub(match: re.Match[str]) -> str:
    if _REFERENCE_KEY.search(match["flag"]):  # --token-path /x, --secret-name y
        return match[0]
    return match["flag"] + match["sep"] + _mask_quoted(match["value"])


def redact_text(text: str) -> str:
    """`text` with registered secrets and credential-looking substrings masked."""
    if len(text) <= _CACHED_LENGTH:
        return _redact_short(text, _registered_re)
    return _redact(text, _registered_re)


# Every status patch redacts every string of the status, and most of them (phases, reasons,
# times, names) repeat from pass to pass: a short text's answer is kept, keyed by the registered
# secrets' pattern too, so a newly registered secret is never served an answer made without it.
_CACHED_LENGTH: Final = 256


@functools.lru_cache(maxsize=4096)
def _redact_short(text: str, pattern: re.Pattern[str] | None) -> str:
    return _redact(text, pattern)


def _redact(text: str, pattern: re.Pattern[str] | None) -> str:
    if pattern is not None:
        text = pattern.sub(MASK, text)
    for regex, replacement in _PATTERNS:
        text = regex.sub(replacement, text)
    text = _FLAG_VALUE.sub(_flag_value_sub, text)
    return _KEY_VALUE.sub(_key_value_sub, text)


def redact_value(value: Any) -> Any:
    """Recursively redact strings in dicts, lists and tuples; mask values of sensitive keys."""
    if isinstance(value, str):
        return redact_text(value)
    if isinstance(value, bytes):
        return redact_text(value.decode("utf-8", errors="replace"))
    if isinstance(value, Mapping):
        return {
            k: (_mask_whole(v) if isinstance(k, str) and _is_sensitive_key(k) else redact_value(v))
            for k, v in value.items()
        }
    if isinstance(value, list | tuple):
        return type(value)(_redact_argv(list(value))) if value else value
    return value


def _mask_whole(value: Any) -> Any:
    """The value of a sensitive key: scalars are masked, structures are searched (a SecretKeyRef
    under `ngcApiKey` holds only a Secret's name and key, which the user needs to see)."""
    # None/bools carry no secret and say whether one was set, which helps debugging.
    if value is None or isinstance(value, bool):
        return value
    if isinstance(value, Mapping | list | tuple):
        return redact_value(value)
    return MASK


def _redact_argv(items: list[Any]) -> list[Any]:
    """Redact each item; in argv-like lists also mask the item after a sensitive flag."""
    out = [redact_value(item) for item in items]
    is_login = any(item == "login" for item in items)
    for i in range(len(items) - 1):
        flag = items[i]
        if not isinstance(flag, str) or not isinstance(items[i + 1], str):
            continue
        sensitive_flag = (flag.startswith("--") and _is_sensitive_key(flag) and "=" not in flag) or (
            is_login and flag == "-p"
        )
        if sensitive_flag:
            out[i + 1] = MASK
    return out


# Fields the logging chain itself adds (configure_logging's shared processors): never text from
# outside, and the timestamp, new on every line, would miss redact_text's cache every time.
_OWN_FIELDS: Final = frozenset({"timestamp", "level", "logger"})


def redact_processor(_: WrappedLogger, __: str, event_dict: EventDict) -> EventDict:
    """structlog processor: redact every field (run after exceptions are formatted to text)."""
    return {key: _redact_field(key, value) for key, value in event_dict.items()}


def _redact_field(key: str, value: Any) -> Any:
    if key in _OWN_FIELDS and isinstance(value, str):
        return value
    return _mask_whole(value) if _is_sensitive_key(key) else redact_value(value)


class RedactingFilter(logging.Filter):
    """Rewrites a stdlib record's message in place, so every handler (kopf's Event poster
    included) sees the redacted text."""

    def filter(self, record: logging.LogRecord) -> bool:
        if isinstance(record.msg, str):
            try:
                message = record.getMessage()
            except (TypeError, ValueError):  # bad %-args: leave it to the formatter to report
                return True
            record.msg, record.args = redact_text(message), None
        return True


def _kopf_object_fields(_: WrappedLogger, __: str, event_dict: EventDict) -> EventDict:
    """Give kopf's per-object lines the namespace/name/uid fields our job lines carry."""
    record = event_dict.get("_record")
    ref = getattr(record, "k8s_ref", None)
    if isinstance(ref, Mapping):
        for key in ("namespace", "name", "uid"):
            if ref.get(key) is not None:
                event_dict.setdefault(key, ref[key])
    return event_dict


class _TaobrevHandler(logging.StreamHandler[TextIO]):
    """Marker class so configure_logging() can replace its own handler when called again."""


def _want_json(stream: TextIO) -> bool:
    if os.environ.get("KUBERNETES_SERVICE_HOST"):
        return True
    isatty: Callable[[], bool] | None = getattr(stream, "isatty", None)
    return not (isatty is not None and isatty())


def configure_logging(
    *,
    json: bool | None = None,
    level: str = "INFO",
    stream: TextIO | None = None,
) -> None:
    """Route structlog and stdlib logging through one redacting formatter on `stream` (stderr).

    `json=None` picks JSON inside a cluster or when the stream is not a terminal. Idempotent:
    calling it again replaces the handler it installed (and a kopf CLI stream handler).
    """
    out = stream if stream is not None else sys.stderr
    as_json = _want_json(out) if json is None else json
    numeric_level = logging.getLevelName(level.upper())
    if not isinstance(numeric_level, int):
        raise ValueError(f"log level {level!r} is not one of DEBUG, INFO, WARNING, ERROR, CRITICAL")

    timestamper = structlog.processors.TimeStamper(fmt="iso", utc=True)
    shared: list[Processor] = [
        structlog.contextvars.merge_contextvars,
        structlog.stdlib.add_logger_name,
        structlog.stdlib.add_log_level,
        timestamper,
    ]
    renderer: Processor = (
        structlog.processors.JSONRenderer()
        if as_json
        else structlog.dev.ConsoleRenderer(colors=bool(getattr(out, "isatty", lambda: False)()))
    )
    formatter = structlog.stdlib.ProcessorFormatter(
        foreign_pre_chain=[*shared, _kopf_object_fields],
        processors=[
            structlog.stdlib.ProcessorFormatter.remove_processors_meta,
            structlog.processors.StackInfoRenderer(),
            structlog.processors.format_exc_info,
            redact_processor,
            renderer,
        ],
    )
    handler = _TaobrevHandler(out)
    handler.setFormatter(formatter)

    root = logging.getLogger()
    root.handlers[:] = [
        h for h in root.handlers if type(h).__name__ not in ("_TaobrevHandler", "_KopfStreamHandler")
    ]
    root.addHandler(handler)
    root.setLevel(numeric_level)

    # kopf's per-object logger also feeds its Event poster: redact before any handler sees it.
    kopf_objects = logging.getLogger("kopf.objects")
    if not any(isinstance(f, RedactingFilter) for f in kopf_objects.filters):
        kopf_objects.addFilter(RedactingFilter())

    structlog.configure(
        processors=[
            structlog.stdlib.filter_by_level,
            *shared,
            structlog.stdlib.PositionalArgumentsFormatter(),
            structlog.stdlib.ProcessorFormatter.wrap_for_formatter,
        ],
        logger_factory=structlog.stdlib.LoggerFactory(),
        wrapper_class=structlog.stdlib.BoundLogger,
        cache_logger_on_first_use=False,
    )


def job_logger(
    namespace: str, name: str, uid: str, phase: str | None, instance: str | None
) -> structlog.stdlib.BoundLogger:
    """A logger whose every line carries the job's identity, phase and instance."""
    logger: structlog.stdlib.BoundLogger = structlog.stdlib.get_logger("taobrev.job")
    return logger.bind(namespace=namespace, name=name, uid=uid, phase=phase, instance=instance)
