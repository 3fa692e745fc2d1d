"""A whole build run: its command line settled once, then the pipeline from its sources to the release tag.

May import: every other package. Nothing here imports a package above it (docs/contributing/layout.md)."""
