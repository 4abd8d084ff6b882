"""Brev identities as the client records them, and whose instances each one reaches (PURE)."""

from __future__ import annotations


def same_reach(recorded: str, current: str) -> bool:
    """Whether `current` can see and delete what `recorded` created. Identities are the client's
    strings (`org-key:<org>:<key digest>`, `user:<subject>`, `token:<digest>`): the same one, or
    an API key of the same org (a rotated key: an org key reaches every instance of its org,
    tests/brevsim/SIM-CONTRACT.md section 3). Anything else is another user's view."""
    if recorded == current:
        return True
    r, c = recorded.split(":"), current.split(":")
    return len(r) >= 3 and len(c) >= 3 and r[0] == c[0] == "org-key" and r[1] == c[1]
