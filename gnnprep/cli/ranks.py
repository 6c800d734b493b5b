"""A command as one rank of a torchrun job (``torchrun --nproc-per-node P -m gnnprep precompute|train``):
what precompute and train share. Every rank runs the same command line; rank 0 alone speaks (its
result, its usage errors, the job's one-line error), the other ranks exit with the same code
silently, and a rank that failed makes every rank fail (:class:`gnnprep.core.distributed.RankFailed`)."""

from __future__ import annotations

from contextlib import contextmanager

import click

from gnnprep.core.errors import GnnprepError


def from_env():
    """torchrun's process group of this process (not started), or None for a plain run (torch is
    not imported then)."""
    from gnnprep.core.distributed import Dist

    return Dist.from_env()


def silent(dist) -> bool:
    """True on a rank other than 0 (None: a plain run, which speaks)."""
    return dist is not None and not dist.is_root


SILENT_EXIT_WAIT = 10.0   # seconds a silent rank waits for rank 0 to speak and exit first


def exit_silently(code: int):
    """Leave a rank other than 0 with the job's exit ``code``, without a word — after rank 0 has had
    time to print the job's one line. torchrun stops every other rank as soon as one exits, so a
    silent rank leaving first could cut rank 0 off before it spoke (seen under load: rank 0 then
    said only "interrupted"). So this rank waits up to SILENT_EXIT_WAIT; rank 0 exits first and
    torchrun's SIGTERM (or a SIGINT) then ends this rank at once with ``code``, quietly."""
    import os
    import signal
    import time

    def leave(signum, frame):
        os._exit(code)

    signal.signal(signal.SIGTERM, leave)
    signal.signal(signal.SIGINT, leave)
    time.sleep(SILENT_EXIT_WAIT)
    raise click.exceptions.Exit(code)


def other_rank() -> bool:
    """True in a torchrun process other than rank 0 (a broken torchrun environment: False, so the
    error is printed)."""
    try:
        return silent(from_env())
    except GnnprepError:
        return False


class RankCommand(click.Command):
    """A usage error is printed by rank 0 alone; the other ranks exit 2 silently."""

    def parse_args(self, ctx, args):
        try:
            return super().parse_args(ctx, args)
        except click.UsageError:
            if other_rank():
                exit_silently(2)
            raise


@contextmanager
def rank_job(dist, start: bool = False):
    """The body of a command on this rank (nothing for a plain run): with ``start`` the process
    group is started first; a failure on any rank is printed by rank 0 and exits 1 silently on the
    others; on success the group is closed. Other errors and interrupts leave without a goodbye to
    peers that may be gone."""
    if dist is None:
        yield
        return
    from gnnprep.core.distributed import RankFailed

    try:
        if start:
            dist.start()
        yield
    except RankFailed:
        dist.close()
        if silent(dist):  # the same error on every rank; rank 0 prints it
            exit_silently(1)
        raise
    dist.close()
