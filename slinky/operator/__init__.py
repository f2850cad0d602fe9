"""The operator's wing of the core (slurm-operator): CRD models and the pure builders and rules of NodeSets and
the other kinds. Never imports the bridge's wing (import-linter)."""
