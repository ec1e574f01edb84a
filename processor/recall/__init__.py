"""Recall: what reaches the agent — recollection files for the hooks, the SessionStart digest, result text."""
