"""The pure lifecycle (PURE: no I/O, time passed in): the phase table, `decide()` and the steps of
each phase, the observations it reads and the actions it returns, recovery and budgets."""
