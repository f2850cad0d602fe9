"""The NodeSet reconciler, split by concern as upstream's ``nodeset_sync*.go``: ``reconciler`` (watches, the
reconcile and its sync: scale, update, condemn), ``pods`` (each pod's steps: create, delete, metadata and
conditions, cordon, drift repair, a deleted pod's Slurm node), ``poll`` (the one shared Slurm node poll per
Controller) and ``status`` (the NodeSet's status and conditions)."""
