"""``python -m gnnprep`` (how torchrun starts every rank: ``torchrun ... -m gnnprep ...``); the
same entry point as the ``gnnprep`` script (a rank that has left its process group cleanly skips
the interpreter's teardown of torch there: :func:`gnnprep.core.distributed.exit_now`)."""

from gnnprep.cli import main

main()
