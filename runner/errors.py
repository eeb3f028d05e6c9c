"""The one error type for bad input: one line, naming the field and what is allowed."""


class InputError(Exception):
    """Bad input from the CLI, a spec file or the dashboard form; nothing has been written."""


class Unmeasured(RuntimeError):
    """A case that cannot be measured now: a machine too busy to time it, or a summary whose inputs
    were not measured. Its run goes on: the case is stored with this one-line reason, the review
    says "not measured" and `decodelab run --only-unmeasured RUN` retries it later."""
