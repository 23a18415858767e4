"""The split-brain demonstration: a scenario runner with real fault injection (``zkcoord demo``)."""
