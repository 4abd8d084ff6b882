"""`make bench`: the operator's figures in real-time ratios (issue 11, "Benchmark").

Every nominal Brev duration (simulator) and every operator interval/timeout is multiplied by one
factor F (`scale.py`), so a run of a few minutes replays hours of real Brev time with the same
ratios; figures are printed in wall seconds and scaled back to real seconds (wall / F).

Modules: `scale` (the factor and what it scales), `figures` (pure arithmetic), `printer` (the
final table), `stack` (control plane, S3, simulator, operator, watches), `sampling` (memory, CPU,
call counts), one module per scenario (`scenario_idle`, `scenario_scale`, `scenario_recovery`),
and `__main__` (runs them all; `--quick` for a small version).
"""
