"""Memory: embeddings, episodes built from captured rounds, ADD/UPDATE/NOOP, and hybrid search."""
