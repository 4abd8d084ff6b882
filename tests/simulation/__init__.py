"""Deterministic simulation of the whole operator (issue 25): see tests/simulation/README.md."""
