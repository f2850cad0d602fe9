"""``python -m workers.bridge``: run the bridge worker process, as ``python -m workers`` does."""

from workers.bridge.worker import main

main()
