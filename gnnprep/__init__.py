"""gnnprep: prepare graphs for GNN training.

The library (this package) never prints and never imports click; the command line lives in
``gnnprep.cli``. Stages communicate through self-describing HDF5 artifacts (see README).
"""

__version__ = "0.1.0"
