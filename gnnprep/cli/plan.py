"""``gnnprep plan --nodes N --entries M --features D``: a precompute plan from sizes alone."""

from __future__ import annotations

import click

from gnnprep.core.errors import GnnprepError, OptionError

from .common import budget_option, emit, json_option, parsed_by, quiet_option, size, warn


def _count(option: str):
    """A click callback reading a count (``1.6M``, ``3.2e9``) with the library's parser."""
    def parse(text: str) -> int:
        from gnnprep.precompute.sizing import parse_count

        return parse_count(text, option)

    return parsed_by(parse)


def _rows(text: str) -> int | None:
    if text.strip().lower() == "all":
        return None
    from gnnprep.precompute.sizing import parse_count

    return parse_count(text, "--rows")


def _machine_memory(text: str) -> int:
    from gnnprep.core.sizes import parse_size

    return parse_size(text, "--machine-memory")


@click.command()
@click.option("--nodes", required=True, metavar="COUNT", callback=_count("--nodes"),
              help="Nodes of the graph, e.g. 111059956, 111M or 1.1e8 (at most 2^40).")
@click.option("--entries", required=True, metavar="COUNT", callback=_count("--entries"),
              help="Stored entries of the CSR (symmetrised: about twice the directed edges; at most 2^44).")
@click.option("--features", required=True, metavar="COUNT", callback=_count("--features"),
              help="Feature columns of X (1 .. 65,536).")
@click.option("--hops", default="3", show_default=True, metavar="K", callback=_count("--hops"),
              help="K: hops S^k X for k = 0..K (0 .. 1024).")
@click.option("--rows", default="all", show_default=True, metavar="all|COUNT", callback=parsed_by(_rows),
              help="Rows stored: all, or a count (precompute --rows labeled: the splits' size).")
@budget_option("Memory the precompute may use (default: half the free RAM here; needed with --device cuda).")
@click.option("--device", type=click.Choice(["cpu", "cuda"]), default="cpu", show_default=True,
              help="Where the precompute will run.")
@click.option("--operators", default="1", show_default=True, metavar="COUNT", callback=_count("--operators"),
              help="Operator channels (1 .. 64).")
@click.option("--weighted", is_flag=True, help="The store has edge weights.")
@click.option("--dtype", type=click.Choice(["float32", "float16"]), default="float32", show_default=True)
@click.option("--order", type=click.Choice(["known", "copy", "none"]), default="known", show_default=True,
              help="known: the node order is kept in the store (the ordered copy written by the first run); "
                   "copy: the ordered copy is already beside it; none: the order must be found.")
@click.option("--machine-memory", default=None, metavar="SIZE", callback=parsed_by(_machine_memory),
              help="Memory of the machine the run will have, page cache included (default: this one's).")
@json_option
@quiet_option
def plan(nodes, entries, features, hops, rows, memory_budget, device, operators, weighted, dtype, order,
         machine_memory, as_json, quiet):
    """Plan a precompute from sizes alone (no data needed): blocks, predicted peak memory and time.

    A budget no plan fits fails (exit 1) naming about the least budget that would.
    """
    from gnnprep.precompute.sizing import check_sizes, default_budget, plan_for_sizes, summary_lines

    sizes = dict(nodes=nodes, entries=entries, features=features, hops=hops, rows=rows, operators=operators,
                 machine_memory=machine_memory)
    try:
        budget = default_budget(device, memory_budget)
        check_sizes(option_names=True, memory_budget=budget, device=device, order=order, **sizes)
    except OptionError as e:  # a value out of its range, alone or against another: a usage error
        raise click.BadParameter(e.message, param_hint=f"'{e.option}'") from None
    res = plan_for_sizes(nodes, entries, features, hops, budget, rows, device, order=order, weighted=weighted,
                         dtype_bytes=2 if dtype == "float16" else 4, operators=operators,
                         machine_memory=machine_memory, warn=lambda message: warn(quiet, message))
    if res["plan"] is None:
        raise GnnprepError(res["error"])
    lines = summary_lines(res)
    lines[0] += f"; budget {size(budget)}" if memory_budget is None else ""
    emit(as_json, {**res, "memory_budget": budget}, lines)
