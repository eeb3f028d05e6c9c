"""The errors the store raises: StoreError for anything a user can fix, and the two ways a
worker learns it must stop touching a job."""


class StoreError(Exception):
    """A store problem stated in one line, safe to print (no passwords)."""


class SchemaBehind(StoreError):
    """The store's schema is older than this code and this command does not migrate it."""


class StoreUnavailable(StoreError):
    """One attempt could not reach a PostgreSQL store (connection refused or dropped, server
    restarting): an outage-surviving caller retries it."""


class StoreDown(StoreError):
    """The store stayed unreachable past the caller's outage limit."""


class ClaimLost(BaseException):
    """The job is no longer this worker's (another worker reclaimed it, or it was finished): the
    store refused the write and the worker must touch nothing more of that job.

    A BaseException, like KeyboardInterrupt, so that no ``except Exception`` on the way (an
    experiment's, or the runner's own "mark the run failed") can swallow it and write after all.
    """
