"""`make bench`: the operator's figures in real-time ratios (issue 11, "Benchmark").

Every nominal Brev duration (simulator) and every operator interval/timeout is multiplied by one
factor F (`scale.py`, default 0.05), so a run of a few minutes replays hours of real Brev time with
the same ratios; figures are printed in wall seconds and scaled back to real seconds (wall / F).
Two scenarios run at F = 1 instead, because what they measure is made of fixed costs (processes,
API calls) that do not shrink with F: isolation (seconds-long latencies) and the operator's
footprint at up to 1,000 running jobs (its nominal intervals, so the calls per minute are real).

Modules: `scale` (the factor and what it scales), `figures` (pure arithmetic), `report` (the table's
figures from each scenario's result), `printer` (the table), `stack` (control plane, S3,
simulator, operator, watches), `sampling` (memory, CPU, call counts), one module per scenario
(`scenario_isolation`, `scenario_scale`, `scenario_idle`, `scenario_rss`, `scenario_recovery`),
and `__main__` (runs them within a 15-minute budget; `--quick` for a small version).
"""
