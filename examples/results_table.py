"""A Markdown table of ``gnnprep train --json`` summaries, one row per run (examples/pipeline.mk's
results.md): ``python examples/results_table.py runs/*.json > results.md``."""

import json
import sys
from pathlib import Path


def table(paths: list[str]) -> str:
    rows = ["| model | valid acc | test acc | best epoch | epochs | seconds | streamed |",
            "|---|---|---|---|---|---|---|"]
    for p in paths:
        s = json.loads(Path(p).read_text())

        def acc(key):
            v, sd = s.get(key), s.get(f"{key}_std") or 0.0
            return "—" if v is None else (f"{v:.4f} ± {sd:.4f}" if s.get("runs", 1) > 1 else f"{v:.4f}")

        rows.append(f"| {s['model']} | {acc('valid_acc')} | {acc('test_acc')} | {s['best_epoch']} | "
                    f"{s['epochs_run']} | {s['seconds']:.2f} | {'yes' if s['streaming'] else 'no'} |")
    return "\n".join(rows) + "\n"


if __name__ == "__main__":
    sys.stdout.write(table(sys.argv[1:]))
