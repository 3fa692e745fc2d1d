"""The catalog: the stack's parts as data (torch releases, pinned sources, plugins, wheels) and each component's
script inputs, computed from them.

May import: base. Nothing here imports a package above it (docs/contributing/layout.md)."""
