"""The bridge's wing of the core (slurm-bridge): admission, node sync, grouping, translation and the workload
lifecycle's models. Pure, or clients passed in; never imports the operator's wing (import-linter)."""
