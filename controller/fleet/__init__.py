"""The fleet: admission under the quotas, the orphan sweeper and the retained-instance record,
leader election (a Lease), and the waits of queued jobs."""
