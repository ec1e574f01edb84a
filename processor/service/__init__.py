"""Service: the running processor — its loop, memory thread, lifecycle, pid lock, control plane and units."""
