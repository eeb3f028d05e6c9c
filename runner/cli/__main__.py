"""``python -m runner.cli.main``: the same entry point as the installed ``decodelab``."""

from runner.cli.main.main import main

main()
