"""Engram's processor: capture → store → memory → recall, with jobs (the one LLM worker) and service beside them."""
