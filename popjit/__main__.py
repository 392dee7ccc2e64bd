"""``python -m popjit``: the ``popjit`` command (see :mod:`popjit.cli`)."""

from popjit.cli import main

if __name__ == "__main__":
    raise SystemExit(main())
