"""The gnnprep version: written into every artifact (``gnnprep_version``) and shown by ``gnnprep
--version``; re-exported as ``gnnprep.__version__``. It lives in ``core`` so the artifact writer reads
it without importing the top package; keep it equal to ``version`` in pyproject.toml (a test holds
that the installed metadata agrees)."""

__version__ = "0.1.0"
