"""``python -m hoarddb`` is the ``hoarddb`` command."""

from .cli import main

main()
