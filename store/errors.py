"""The one error type the store raises for anything a user can fix."""


class StoreError(Exception):
    """A store problem stated in one line, safe to print (no passwords)."""
