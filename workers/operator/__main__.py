"""``python -m workers.operator``: run the operator process (settings from the environment)."""

from workers.operator.process import main

main()
