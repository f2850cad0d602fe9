"""The `slinky.slurm.net/v1beta1` API: pydantic models with upstream's field names and defaults.

The CRD YAML in `deploy/crds/slinky/` is generated from these models (`slinky.operator.api.crds`).
"""
