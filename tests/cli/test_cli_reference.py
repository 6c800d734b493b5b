"""docs/cli.md's generated block is every command's ``--help`` as the code renders it now
(issue 25, item 4): an option added, removed or changed without ``python -m gnnprep.cli.reference``
fails here, naming the command and the option. Also ``gnnprep --version``."""

from __future__ import annotations

import importlib.metadata
import subprocess
import sys
from pathlib import Path

import click
from click.testing import CliRunner

from gnnprep import __version__
from gnnprep.cli import cli, reference

ROOT = Path(__file__).resolve().parents[2]
DOC = ROOT / "docs" / "cli.md"


def test_docs_cli_md_is_generated_from_the_commands():
    diffs = reference.differences(reference.documented_block(DOC.read_text()), reference.render())
    assert diffs == [], "docs/cli.md is stale (run python -m gnnprep.cli.reference):\n" + "\n".join(diffs)


def test_every_command_and_option_is_in_the_reference():
    block = reference.documented_block(DOC.read_text())
    for name, cmd, _ctx in reference.commands():
        assert f"### `{name}`" in block, name
        for p in cmd.params:
            for opt in getattr(p, "opts", []) if isinstance(p, click.Option) else []:
                assert opt in block, f"{name}: {opt}"


def _with_extra_option():
    """A copy of the root group whose ``train`` has one option the docs do not have."""
    train = cli.get_command(None, "train")
    extra = click.Option(["--undocumented-knob"], type=int, default=3, help="Not in docs/cli.md.")
    changed = click.Command(train.name, params=[*train.params, extra], help=train.help, callback=train.callback)
    group = click.Group(cli.name, commands={**cli.commands, "train": changed}, help=cli.help,
                        params=cli.params, context_settings=cli.context_settings)
    return group


def test_an_undocumented_option_is_named():
    documented = reference.documented_block(DOC.read_text())
    diffs = reference.differences(documented, reference.render(_with_extra_option()))
    assert "gnnprep train: option --undocumented-knob is not documented" in diffs


def test_a_removed_option_and_a_changed_default_are_named():
    wanted = reference.render()
    stale = wanted.replace("  --no-save ", "  --no-savex")
    assert "gnnprep calibrate: option --no-save is not documented" in reference.differences(stale, wanted)
    assert any("--no-savex is documented but no longer exists" in d for d in reference.differences(stale, wanted))
    changed = wanted.replace("[default: 200000;", "[default: 100000;")
    assert reference.differences(changed, wanted) == ["gnnprep calibrate: option --nodes has changed (help, type or default)"]
    assert reference.differences(None, wanted)
    assert reference.differences(wanted, wanted) == []


def test_update_replaces_only_the_block(tmp_path):
    wanted = reference.render()
    text = "# hand\n\nprose\n\n" + reference.BEGIN + "\nold\n" + reference.END + "\n\nafter\n"
    new = reference.update(text, wanted)
    assert new.startswith("# hand\n\nprose\n\n") and new.endswith("\n\nafter\n")
    assert reference.documented_block(new) == wanted
    p = tmp_path / "cli.md"
    p.write_text("# only prose\n")
    assert reference.main([str(p)]) == 0
    assert reference.main(["--check", str(p)]) == 0
    p.write_text(p.read_text().replace("  --no-save ", "  --no-savex"))
    assert reference.main(["--check", str(p)]) == 1


def test_version_is_the_package_metadata():
    r = CliRunner().invoke(cli, ["--version"])
    assert r.exit_code == 0
    assert r.output == f"gnnprep, version {__version__}\n"
    assert __version__ == importlib.metadata.version("gnnprep")


def test_version_through_the_entry_point():
    r = subprocess.run([sys.executable, "-m", "gnnprep", "--version"], capture_output=True, text=True, timeout=120)
    assert r.returncode == 0, r.stderr
    assert r.stdout.strip() == f"gnnprep, version {__version__}" and r.stderr == ""


def test_shell_completion_script():
    import os

    env = {**os.environ, "_GNNPREP_COMPLETE": "bash_source"}
    r = subprocess.run([sys.executable, "-c", "from gnnprep.cli import main; main()"], env=env,
                       capture_output=True, text=True, timeout=120)
    assert r.returncode == 0, r.stderr
    assert "_GNNPREP_COMPLETE" in r.stdout and "complete " in r.stdout


def test_the_generator_writes_no_file_named_after_an_option(tmp_path, monkeypatch, capsys):
    """``python -m gnnprep.cli.reference --help`` once wrote the reference to a file named --help."""
    from gnnprep.cli.reference import main

    monkeypatch.chdir(tmp_path)
    assert main(["--help"]) == 2 and main(["a.md", "b.md"]) == 2
    assert "usage" in capsys.readouterr().err and not list(tmp_path.iterdir())
