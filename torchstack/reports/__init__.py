"""What a person sees: the live view of a build, its log and summary table, the printed plan.

May import: base, catalog, registries, engines, request. Nothing here imports a package above it
(docs/contributing/layout.md)."""
