"""The one error type for bad input: one line, naming the field and what is allowed."""


class InputError(Exception):
    """Bad input from the CLI, a spec file or the dashboard form; nothing has been written."""
