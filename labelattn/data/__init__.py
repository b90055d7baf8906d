"""Labelled data: the records every reader fills (`records`), users' files read as written (`tables`), labels and
their groups (`hierarchy`), the published splits (`splits`), the one entry point that does all of it (`reading`:
`load_data`, `load_texts`) and the built-in data sets (`builtin`). Imports nothing else of labelattn."""
