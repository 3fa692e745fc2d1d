"""A build's request: its options and the host, the plan the catalog makes of them, the names and labels its
images get.

May import: base, catalog, registries, engines. Nothing here imports a package above it
(docs/contributing/layout.md)."""
