"""``python -m workers.exporter``: the Slurm exporter (settings from the environment; docs/metrics.md)."""

from workers.operator.exporter import main

if __name__ == "__main__":
    main()
