"""The container engines: which one answers and what it is, how each of its builders builds one image, what it
vouches for.

May import: base, catalog, registries. Nothing here imports a package above it (docs/contributing/layout.md)."""
