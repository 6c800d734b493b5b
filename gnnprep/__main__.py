"""``python -m gnnprep`` (how torchrun starts every rank: ``torchrun ... -m gnnprep ...``).

A rank that has left its process group cleanly skips the interpreter's teardown of torch
(:func:`gnnprep.distributed.exit_now`); every other run exits normally."""

from gnnprep.cli import main

try:
    main()
except SystemExit as e:
    from gnnprep.distributed import exit_now

    exit_now(e.code)  # returns unless this is a rank that left its group cleanly with nothing unfinished
    raise
