"""Labelled data: reading a user's CSV/JSONL/datasets rows (`reading`) and the built-in data sets (`builtin`).
Imports nothing else of labelattn."""
