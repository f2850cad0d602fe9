"""``python -m workers.webhook``: the bridge's admission webhook under its earlier name (now
``python -m workers.bridge.webhook``; kept so existing deployments keep starting)."""

from workers.bridge.webhook import main

if __name__ == "__main__":
    main()
