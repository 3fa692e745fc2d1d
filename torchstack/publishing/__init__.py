"""Checked images out to a registry: pushed, signed and attested, indexed for lazy pulls, joined across
architectures, with the policy nodes admit them by.

May import: every package above but run. Nothing here imports a package above it
(docs/contributing/layout.md)."""
