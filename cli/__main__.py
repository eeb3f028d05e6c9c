"""``python -m cli``: the same entry point as the installed ``decodelab``."""

from cli.main import main

main()
