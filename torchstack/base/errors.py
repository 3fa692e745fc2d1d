"""The errors the command turns into one line on stderr with an exit status."""


class ToolkitError(Exception):
    """A problem the user can act on; its message is the one line printed."""

    exit_code = 1


class UsageProblem(ToolkitError):
    """Bad input: an unknown or impossible combination of options."""

    exit_code = 2


class DataError(UsageProblem):
    """A data file (ours or the user's) is missing, not YAML, or fails validation."""


class HostNotReady(ToolkitError):
    """This build host lacks a tool the build needs; the message names the command that installs it."""

    exit_code = 2


class EngineUnavailable(ToolkitError):
    """No Docker engine answers."""


class BuildFailed(ToolkitError):
    """A build step failed; the message names the stage, the step and the log."""


class ChecksumMismatch(ToolkitError):
    """A downloaded or mirrored source does not match its pinned sha256."""


class ChecksFailed(ToolkitError):
    """Image checks failed; the release tag was not applied."""
