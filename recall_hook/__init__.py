"""Claude Code hook entry points. Stdlib only: their import time is the hook's latency."""
