"""The ``decodelab`` command line, one module per group of commands."""
