"""Each status sub-record has one writer: its own methods in controller/api/status.py.

The lifecycle says what happened (`status.instance.delete_sent(now)`, `status.run.exited(...)`);
only the record decides what that changes. So who can change `attempts[].instance` (or `run`,
`upload`, `queue`, `teardown`, an attempt's own fields) is answered by one class, not by a grep
over the lifecycle. This test reads the operator's source and fails on any assignment into a
sub-record anywhere else, directly (`s.instance.id = x`) or through a name bound to one
(`rec = s.instance; rec.id = x`, `for rec in s.attempts: rec.billed_seconds = ...`).
"""

from __future__ import annotations

import ast
from pathlib import Path

CONTROLLER = Path(__file__).resolve().parents[2] / "controller"
OWNERS = {CONTROLLER / "api" / "status.py", CONTROLLER / "api" / "status_legacy.py"}
# Attributes that hold a sub-record (or the current attempt).
RECORDS = frozenset(
    {"queue", "teardown", "attempts", "current", "instance", "run", "upload", "absence", "progress", "steps"}
)
# Calls that return an attempt record.
ATTEMPT_CALLS = frozenset({"current", "start_attempt", "step_record"})


def _is_record(expr: ast.expr) -> bool:
    if isinstance(expr, ast.Attribute):
        return expr.attr in RECORDS and _on_status(expr.value)
    if isinstance(expr, ast.Subscript):
        return _is_record(expr.value)
    if isinstance(expr, ast.Call):
        func = expr.func
        name = func.attr if isinstance(func, ast.Attribute) else func.id if isinstance(func, ast.Name) else ""
        return name in ATTEMPT_CALLS
    return False


def _on_status(expr: ast.expr) -> bool:
    """The attribute's owner is a status or a record (not e.g. `p.obs.instance`, an observation)."""
    while isinstance(expr, ast.Attribute | ast.Subscript):
        if isinstance(expr, ast.Attribute) and expr.attr in ("obs", "spec", "plan"):
            return False
        if isinstance(expr, ast.Attribute) and (expr.attr in ("s", "status") or expr.attr in RECORDS):
            return True
        expr = expr.value
    return isinstance(expr, ast.Name) and expr.id in ("s", "status", "new", "old", "st")


def writes_into_records(tree: ast.AST) -> list[tuple[int, str]]:
    found: list[tuple[int, str]] = []
    for func in ast.walk(tree):
        if not isinstance(func, ast.FunctionDef | ast.AsyncFunctionDef):
            continue
        aliases: set[str] = set()
        for node in ast.walk(func):
            if isinstance(node, ast.Assign) and _is_record(node.value):
                aliases |= {t.id for t in node.targets if isinstance(t, ast.Name)}
            if isinstance(node, ast.For) and _is_record(node.iter) and isinstance(node.target, ast.Name):
                aliases.add(node.target.id)
        for node in ast.walk(func):
            targets: list[ast.expr] = []
            if isinstance(node, ast.Assign):
                targets, line = node.targets, node.lineno
            elif isinstance(node, ast.AugAssign | ast.AnnAssign):
                targets, line = [node.target], node.lineno
            for target in targets:
                if not isinstance(target, ast.Attribute):
                    continue
                owner = target.value
                into_record = _is_record(owner) or (isinstance(owner, ast.Name) and owner.id in aliases)
                replaces_record = target.attr in RECORDS and _on_status(target.value)
                if into_record or replaces_record:
                    found.append((line, ast.unparse(target)))
    return found


def test_no_module_but_the_records_writes_into_a_sub_record() -> None:
    offenders = []
    sources = sorted(CONTROLLER.rglob("*.py"))
    assert len(sources) > 50, "the operator's modules were found"
    for path in sources:
        if path in OWNERS:
            continue
        for line, target in writes_into_records(ast.parse(path.read_text())):
            offenders.append(f"{path.relative_to(CONTROLLER.parent)}:{line}: {target} = ...")
    assert offenders == [], "write through the record's methods (controller/api/status.py):\n" + "\n".join(
        offenders
    )


def test_the_check_sees_every_form_of_write() -> None:
    sample = """
def f(p, status):
    p.s.instance.id = "x"
    status.run.exit_code += 1
    rec = p.s.current
    rec.ended_at = now
    last = p.s.attempts[-1]
    last.billed_seconds = 3
    for a in p.s.attempts:
        a.estimated_cost_dollars = 1.0
    got = current(p)
    got.restored_at = now
    p.s.queue = None
    p.s.reason = "fine: top level"
    p.obs.instance = None
    inst = p.obs.instance
    inst.status = "fine: an observation"
"""
    found = sorted(target for _, target in writes_into_records(ast.parse(sample)))
    assert found == sorted(
        [
            "p.s.instance.id",
            "status.run.exit_code",
            "rec.ended_at",
            "last.billed_seconds",
            "a.estimated_cost_dollars",
            "got.restored_at",
            "p.s.queue",
        ]
    )
