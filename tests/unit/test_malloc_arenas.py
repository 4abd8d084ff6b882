"""controller.malloc_arenas: the operator caps glibc's arenas unless the environment chose."""

from __future__ import annotations

import pytest

from controller.malloc_arenas import cap_malloc_arenas


def test_the_cap_applies_on_glibc() -> None:
    # This machine (and the image: Debian) runs glibc: the cap must take, not be skipped.
    assert cap_malloc_arenas() is True


def test_an_explicit_malloc_arena_max_wins(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("MALLOC_ARENA_MAX", "4")
    assert cap_malloc_arenas() is False
