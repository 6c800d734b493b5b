"""Hyperparameter search over :func:`gnnprep.train.trainer.train`: a grid, chosen on validation accuracy only.

Every grid point is one *trial*: one ``train`` call with ``seeds`` seeded runs starting at
``seed + SELECTION_SEED_OFFSET`` (far from the reported seeds, so the final runs are fresh). Points
are scored by their mean validation accuracy and the first best one wins ties; the test split of a
grid trial is never read while choosing (:func:`selection_result` keeps no test score). The chosen
point is then trained again with ``report_seeds`` fresh runs, seeds ``seed .. seed + report_seeds -
1``, whose test accuracy (at each run's best validation epoch) is the reported mean ± sample std.
They run as one trial per seed, so they run in parallel like the grid; the numbers equal one
``train`` call with ``runs = report_seeds`` (run r of a call is seeded ``seed + r`` afresh).

The modules, one concept each:

- :mod:`.grid`: the tunable TrainConfig fields, ``--grid`` text read into values and written back;
- :mod:`.config`: :class:`TuneConfig`, the settings of one tune, and their checks;
- :mod:`.trials`: a trial and its key, the validation-only result selection sees, the choice, the
  report of the chosen point's reruns (:class:`TuneReport`);
- :mod:`.artifact`: the features artifact's identity and the sizes the memory estimate needs;
- :mod:`.folder`: the resumable tune folder (its layout, lock, records and resume checks);
- :mod:`.workers`: the spawned worker processes and the memory budget that caps how many run;
- :mod:`.search`: :func:`tune`, which runs them together.

Importing this package is cheap: torch is imported by the workers (or the runner) when a trial runs.
"""

from gnnprep.train.tune.artifact import ArtifactFacts, features_fingerprint, read_facts
from gnnprep.train.tune.config import MAX_POINTS, SELECTION_SEED_OFFSET, TuneConfig
from gnnprep.train.tune.grid import (
    NOT_TUNABLE,
    format_params,
    format_value,
    option_name,
    parse_grid,
    parse_value,
    tunable_fields,
)
from gnnprep.train.tune.search import tune
from gnnprep.train.tune.trials import (
    EXECUTION_FIELDS,
    Trial,
    TrialResult,
    TuneReport,
    choose,
    combine_runs,
    make_trial,
    selection_result,
)
from gnnprep.train.tune.workers import TORCH_ALLOWANCE, Runner, plan_jobs, run_trial, trial_bytes

__all__ = [
    "ArtifactFacts", "EXECUTION_FIELDS", "MAX_POINTS", "NOT_TUNABLE", "Runner", "SELECTION_SEED_OFFSET",
    "TORCH_ALLOWANCE", "Trial", "TrialResult", "TuneConfig", "TuneReport", "choose", "combine_runs",
    "features_fingerprint", "format_params", "format_value", "make_trial", "option_name", "parse_grid",
    "parse_value", "plan_jobs", "read_facts", "run_trial", "selection_result", "trial_bytes", "tunable_fields",
    "tune",
]
