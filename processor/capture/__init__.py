"""Capture: which files are transcripts, reading their new lines by byte offset, what a line means, secrets."""
