"""``python -m packcli``: the same as the ``packcli`` command."""

from packcli.cli import main

main()
