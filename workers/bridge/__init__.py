"""The bridge's processes: the worker (``worker``: Temporal worker of the workload workflows, the pod watcher,
the one Slurm job watcher, node sync, garbage collection) and the admission webhook (``webhook``)."""
