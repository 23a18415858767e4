"""``python -m zkcoord``: the same as the ``zkcoord`` console script (used to start child processes)."""

from zkcoord.cli import main

main()
