"""Nothing to run: its torch pin is the point."""
