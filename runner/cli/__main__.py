"""``python -m runner.cli``: the same entry point as the installed ``decodelab``."""

from runner.cli.main import main

main()
