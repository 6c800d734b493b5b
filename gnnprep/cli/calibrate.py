"""``gnnprep calibrate``."""

from __future__ import annotations

import click

from .common import Progress, device_option, emit, json_option, quiet_option


@click.command()
@device_option("cpu")
@click.option("--nodes", type=click.IntRange(min=1000), default=200_000, show_default=True, help="Size of the generated graph.")
@click.option("--no-save", is_flag=True, help="Measure and print only.")
@json_option
@quiet_option
def calibrate(device, nodes, no_save, as_json, quiet):
    """Measure the precompute cost model's coefficients and the HAG search's speed on this machine, and save them."""
    from gnnprep.core.device import resolve
    from gnnprep.precompute.calibrate import as_dict  # heavy: numba kernels, torch
    from gnnprep.precompute.calibrate import calibrate as run_calibrate

    progress = Progress(quiet)
    try:
        prof, path = run_calibrate(resolve(device), nodes=nodes, progress=progress, save=not no_save)
    finally:
        progress.close()
    d = {**as_dict(prof), "saved_to": str(path) if path else None}
    table = ", ".join(f"{w}: {ns:.1f}" for w, ns in sorted(prof.spmm_ns_per_nnz.items()))
    emit(as_json, d, [
        f"kernel ns per nonzero by column width: {table}",
        f"row term {prof.row_ns_per_col} ns/col; HDF5 read {prof.read_bytes_per_s / 1e9:.2f} GB/s, "
        f"write {prof.write_bytes_per_s / 1e9:.2f} GB/s; copy {prof.copy_bytes_per_s / 1e9:.2f} GB/s; "
        f"block overhead {prof.block_overhead_s * 1e3:.2f} ms; HAG search {prof.hag_search_scale:g}x the reference "
        "machine's time",
        f"saved to {path}" if path else "not saved (--no-save)",
    ])
