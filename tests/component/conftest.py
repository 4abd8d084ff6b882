from __future__ import annotations

from collections.abc import Iterator

import pytest

from tests.fakes.quiet import quiet_logs


@pytest.fixture(autouse=True)
def _quiet() -> Iterator[None]:
    with quiet_logs():
        yield
