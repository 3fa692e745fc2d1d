"""The ground the other parts stand on: the errors, where the toolkit keeps its state on the host, where things
live in an image, what makes builds reproducible, one host shared by many runs.

May import: nothing of the toolkit's. Nothing here imports a package above it (docs/contributing/layout.md)."""
