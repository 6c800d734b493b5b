"""Run a command and report its own peak RSS: ``python benchmarks/launcher.py CMD...``.

Linux carries a parent's peak RSS into a forked child's ru_maxrss across fork + exec, so a command
started by a large benchmark process would report at least that process's peak. This tiny process
starts the command, reaps it with os.wait4 and writes the command's own ru_maxrss (bytes) and the
bytes it read from the disk (ru_inblock, 512-byte units: reads the page cache served are not
counted) on its last stderr line, ``__peak_rss=N __read_bytes=M``; it exits with the command's
exit status. Used by
``harness.run_measured``; it imports nothing but the standard library's os, subprocess and sys.
"""
import os
import subprocess
import sys

if __name__ == "__main__":
    proc = subprocess.Popen(sys.argv[1:])
    _, status, usage = os.wait4(proc.pid, 0)
    sys.stderr.write(f"__peak_rss={usage.ru_maxrss * 1024} __read_bytes={usage.ru_inblock * 512}\n")
    sys.exit(os.waitstatus_to_exitcode(status))
