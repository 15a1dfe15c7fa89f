"""The errors kvlab's functions raise for bad input, defined below every layer so that the commands (which turn
them into one line and an exit code) and the Python API (which raises them) share them without importing each
other's code."""

__all__ = ["KvlabError", "SettingError"]


class KvlabError(ValueError):
    """Bad input (data, a file): the message is the one line the command prints; ``status`` its exit code."""

    status = 1


class SettingError(KvlabError):
    """A setting the command refuses (a bad value, settings that do not go together): its exit code is 2."""

    status = 2
