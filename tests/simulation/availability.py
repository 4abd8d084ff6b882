"""When each deployment of the simulation could act: a live replica held its Lease and reached the
API server. A billing bound is a promise about the operator's own work, so it is counted over
that time only: a world where every replica is cut off (lease_partition at 0.2 per call keeps
the Lease changing hands every few seconds) stops every operator, and no bound can hold there
(seed 19978)."""

from __future__ import annotations

import math
from collections import defaultdict
from collections.abc import Iterable


class Availability:
    def __init__(self) -> None:
        self._deployment: dict[str, str] = {}
        self._leading: dict[str, list[list[float]]] = defaultdict(list)  # [start, end]; end inf while leading
        self._cut: dict[str, list[tuple[float, float]]] = defaultdict(list)

    def leads(self, proc: str, deployment: str, now: float) -> None:
        self._deployment[proc] = deployment
        spans = self._leading[proc]
        if not spans or spans[-1][1] != math.inf:
            spans.append([now, math.inf])

    def stops_leading(self, proc: str, now: float) -> None:
        """The lead lost, or the replica crashed."""
        spans = self._leading.get(proc)
        if spans and spans[-1][1] == math.inf:
            spans[-1][1] = now

    def cut_off(self, proc: str, start: float, until: float) -> None:
        self._cut[proc].append((start, until))

    def able(self, deployment: str, t0: float, t1: float) -> float:
        """Seconds of [t0, t1] during which some replica of `deployment` could act."""
        spans: list[tuple[float, float]] = []
        for proc, leading in self._leading.items():
            if self._deployment.get(proc) != deployment:
                continue
            for start, end in leading:
                spans.extend(_minus((max(start, t0), min(end, t1)), self._cut.get(proc, ())))
        return _union_length(spans)


def _minus(span: tuple[float, float], cuts: Iterable[tuple[float, float]]) -> list[tuple[float, float]]:
    pieces = [span] if span[0] < span[1] else []
    for c0, c1 in cuts:
        pieces = [p for a, b in pieces for p in ((a, min(b, c0)), (max(a, c1), b)) if p[0] < p[1]]
    return pieces


def _union_length(spans: list[tuple[float, float]]) -> float:
    total, reach = 0.0, -math.inf
    for a, b in sorted(spans):
        if b <= reach:
            continue
        total += b - max(a, reach)
        reach = b
    return total
