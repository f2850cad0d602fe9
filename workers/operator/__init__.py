"""The operator's process (``process``): one controller runtime (``runtime``: shared watches, a work queue per
kind, status and Events) running a reconciler per kind, each in its own file (``controller``, ``restapi``,
``accounting``, ``loginset``, ``nodeset``, ``token``), the shared Slurm clients and node poll, and the Temporal
worker of the scale-in and reconfigure workflows."""
