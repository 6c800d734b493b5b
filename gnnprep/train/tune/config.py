"""The settings of one tune (:class:`TuneConfig`): the grid, the fixed train overrides, the seeds
of selection and of the report, and how many trials run at once; all checked before anything is
read."""

from __future__ import annotations

import dataclasses
import itertools
from dataclasses import dataclass, field

from gnnprep.core.errors import GnnprepError, OptionError
from gnnprep.train.config import MAX_THREADS, TrainConfig, int_check
from gnnprep.train.tune.grid import format_params, format_value, option_name, tunable_fields

SELECTION_SEED_OFFSET = 1000          # grid trials start here above the base seed (at least report_seeds)
MAX_POINTS = 10_000


@dataclass(frozen=True)
class TuneConfig:
    """A grid search: ``grid`` is ((field, values), ...) in TrainConfig field names, ``fixed`` the
    train overrides shared by every trial (only what the user set; the rest stays TrainConfig's
    default). ``seed`` is the base seed, ``seeds`` the runs per grid point, ``report_seeds`` the runs
    of the chosen point; ``jobs`` parallel trials (0: as many as fit), ``threads`` torch threads per
    trial (None: cpu_count // jobs), ``memory_budget`` bytes for all trials together (None: half the
    free RAM)."""

    model: str
    grid: tuple[tuple[str, tuple], ...] = ()
    fixed: dict = field(default_factory=dict)
    seed: int = 0
    seeds: int = 2
    report_seeds: int = 10
    jobs: int = 1
    memory_budget: int | None = None
    threads: int | None = None

    def points(self) -> list[dict]:
        """Every grid point, the first key outermost (the order of the table and of tie-breaking)."""
        keys = [k for k, _ in self.grid]
        return [dict(zip(keys, values)) for values in itertools.product(*(v for _, v in self.grid))]

    @property
    def selection_seed(self) -> int:
        return self.seed + max(SELECTION_SEED_OFFSET, self.report_seeds)

    def train_config(self, params: dict, seed: int, runs: int, **execution) -> TrainConfig:
        """The TrainConfig of one trial: the fixed overrides, the point's values, seeds, and
        ``execution`` (threads, memory_budget: how it runs, not what it computes)."""
        return TrainConfig(model=self.model, **self.fixed, **params, seed=seed, runs=runs, **execution)

    def check(self) -> None:
        """Every setting, before anything is read: GnnprepError naming the option at fault."""
        for name, v in (("--seeds", self.seeds), ("--report-seeds", self.report_seeds)):
            int_check(name, 1, 1 << 30)(v)
        int_check("--jobs", 0, MAX_THREADS)(self.jobs)
        if self.threads is not None:
            int_check("--threads", 1, MAX_THREADS)(self.threads)
        if self.memory_budget is not None and self.memory_budget <= 0:
            raise OptionError("--memory-budget", f"{self.memory_budget}: expected a positive size")
        fields = tunable_fields()
        for key in self.fixed:
            if key not in fields:
                raise GnnprepError(f"fixed train option {key!r}: not a tunable TrainConfig field")
        self.train_config({}, self.seed, self.report_seeds).check()
        self.train_config({}, self.selection_seed, self.seeds).check()
        self._check_grid(fields)

    def _check_grid(self, fields: dict) -> None:
        if not self.grid:
            raise OptionError("--grid", "expected at least one key=v1,v2", sep=": ")
        seen = set()
        for name, values in self.grid:
            if name not in fields:
                raise OptionError("--grid", f"{option_name(name)!r}: unknown key")
            if name in seen or not values:
                raise OptionError("--grid", f"{option_name(name)}: given twice or without values")
            seen.add(name)
            if name in self.fixed:
                raise OptionError("--grid", f"{option_name(name)}: also given as --{option_name(name)}; "
                                            "give it either in the grid or as a fixed option")
            for v in values:
                try:
                    self.train_config({name: v}, self.seed, 1).check()
                except GnnprepError as e:
                    raise OptionError("--grid", f"{option_name(name)}={format_value(v)}: {_what(e)}") from None
        points = 1
        for _, values in self.grid:
            points *= len(values)
        if points > MAX_POINTS:
            raise OptionError("--grid", f"{points} points; expected at most {MAX_POINTS}", sep=": ")
        for p in self.points():
            for seed, runs in ((self.selection_seed, self.seeds), (self.seed, self.report_seeds)):
                try:
                    self.train_config(p, seed, runs).check()
                except GnnprepError as e:
                    raise OptionError("--grid", f"{format_params(p)}: {e}") from None

    def to_dict(self) -> dict:
        d = dataclasses.asdict(self)
        d["grid"] = [[k, list(v)] for k, v in self.grid]
        return d


def _what(e: GnnprepError) -> str:
    """The reason of a TrainConfig refusal without its leading ``--option value:``."""
    text = str(e)
    head, sep, rest = text.partition(": ")
    return rest if sep and head.startswith("--") else text
