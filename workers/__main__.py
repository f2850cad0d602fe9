"""``python -m workers``: run the bridge worker process (settings from the environment)."""

from workers.bridge.worker import main

main()
