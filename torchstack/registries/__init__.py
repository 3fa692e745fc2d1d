"""Registries spoken to directly: a registry's HTTP API, with its logins and TLS trust found where the engines
find them.

May import: base, catalog. Nothing here imports a package above it (docs/contributing/layout.md)."""
