"""A plan made into images: sources fetched, contexts rendered, the OS image bootstrapped, each stage built, the
release image made current.

May import: base, catalog, registries, engines, request, reports. Nothing here imports a package above it
(docs/contributing/layout.md)."""
