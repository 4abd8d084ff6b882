"""In-memory fakes of everything outside the operator (Brev, the remote workload, Kubernetes,
time), for the component and model tiers: no I/O, no sleeps, time advanced by the test."""
