"""The toolkit's own release, as `--version` prints it (an image's labels carry it too)."""

VERSION = "0.1.0"
