"""Images proven: the image checks, and an image built again and compared.

May import: base, catalog, registries, engines, request, reports, build. Nothing here imports a package above
it (docs/contributing/layout.md)."""
