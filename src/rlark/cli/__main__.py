"""``python -m rlark.cli``: the ``rlark`` command."""

from rlark.cli import main

main()
