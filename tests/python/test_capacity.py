"""scripts/capacity.py against docs/capacity.md: the doc and the script cannot drift.

- Every worked example in the doc (a ```sh block running scripts/capacity.py,
  then a ```text block) is run, and its output must be the text block, byte
  for byte.
- Every figure in the script's FIGURES is in the doc's inputs table with the
  same value and the same status (measured / extrapolated), and the other way
  round.
- Bad input is refused with exit code 2 and a message naming the flag (or the
  config file's key); a config file gives the same answer as the flags.

No gateway is needed: these run the script only.
"""

from __future__ import annotations

import importlib.util
import json
import re
import shlex
import subprocess
import sys
from pathlib import Path

import pytest

REPO = Path(__file__).resolve().parents[2]
SCRIPT = REPO / "scripts" / "capacity.py"
DOC = REPO / "docs" / "capacity.md"

FIELD = ["--sessions", "1100000", "--user-pubs", "12000", "--client-pubs", "1000",
         "--client-audience", "1288", "--delayed", "3500", "--edges", "21", "--roots", "2",
         "--source-addresses", "1"]


def run(*args: str) -> subprocess.CompletedProcess:
    return subprocess.run([sys.executable, str(SCRIPT), *args], capture_output=True, text=True,
                          timeout=60)


def figures() -> dict:
    spec = importlib.util.spec_from_file_location("capacity", SCRIPT)
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module.FIGURES


def worked_examples() -> list[tuple[str, str]]:
    """(command, expected output) of each worked example in the doc."""
    text = DOC.read_text()
    pairs = re.findall(r"```sh\n(scripts/capacity\.py[^`]*?)\n```\n+```text\n(.*?)```", text, re.S)
    return [(" ".join(line.rstrip("\\").strip() for line in cmd.splitlines()), out)
            for cmd, out in pairs]


def test_the_doc_has_both_worked_examples():
    commands = [cmd for cmd, _ in worked_examples()]
    assert len(commands) >= 2, commands
    assert any("--sessions 1100000" in c for c in commands)
    assert any("--sessions 10000000" in c and "--edges 100" in c for c in commands)


@pytest.mark.parametrize("command,expected", worked_examples())
def test_worked_example_output_is_what_the_doc_says(command, expected):
    args = shlex.split(command)[1:]
    result = run(*args)
    assert result.returncode == 0, result.stderr
    assert result.stdout == expected, (
        f"docs/capacity.md is stale for `{command}`: paste the script's output into it")


def doc_inputs() -> dict[str, tuple[float, str]]:
    """`key` -> (value, status) from the inputs table rows of the doc."""
    rows = {}
    for line in DOC.read_text().splitlines():
        m = re.match(r"\|\s*`([a-z_]+)`\s*\|\s*([0-9][0-9,.]*)\s*\|[^|]*\|\s*(measured|extrapolated)\b", line)
        if m:
            rows[m.group(1)] = (float(m.group(2).replace(",", "")), m.group(3))
    return rows


def test_every_figure_is_in_the_doc_with_its_value_and_status():
    doc = doc_inputs()
    for key, (value, status, _source) in figures().items():
        assert key in doc, f"{key} is not in docs/capacity.md's inputs table"
        assert doc[key] == (float(value), status), f"{key}: script {value} {status}, doc {doc[key]}"
    assert set(doc) <= set(figures()), f"the doc lists figures the script lacks: {set(doc) - set(figures())}"


@pytest.mark.parametrize("args,flag", [
    (["--sessions", "abc", "--user-pubs", "1"], "--sessions"),
    (["--sessions", "1.5", "--user-pubs", "1"], "--sessions"),
    (["--sessions", "1000", "--client-pubs", "-3"], "--client-pubs"),
    (["--sessions", "1000", "--user-pubs", "nan"], "--user-pubs"),
    (["--sessions", "1000", "--user-pubs", "1", "--cpu-target", "1.5"], "--cpu-target"),
    (["--sessions", "1000", "--user-pubs", "1", "--edges", "1"], "--edges"),
    (["--sessions", "1000", "--user-pubs", "1", "--routing", "sideways"], "--routing"),
    (["--user-pubs", "1"], "--sessions"),
    (["--sessions", "1000"], "--user-pubs"),
])
def test_bad_input_is_refused_naming_the_flag(args, flag):
    result = run(*args)
    assert result.returncode == 2
    assert result.stdout == ""
    assert result.stderr.startswith(f"error: {flag}:"), result.stderr


def test_a_config_file_gives_what_the_flags_give(tmp_path):
    keys = dict(zip(FIELD[0::2], FIELD[1::2]))
    data = {k[2:].replace("-", "_"): float(v) for k, v in keys.items()}
    as_json = tmp_path / "field.json"
    as_json.write_text(json.dumps(data))
    as_toml = tmp_path / "field.toml"
    as_toml.write_text("".join(f"{k} = {v}\n" for k, v in data.items()))
    flags = run(*FIELD)
    assert flags.returncode == 0, flags.stderr
    assert run("--config", str(as_json)).stdout == flags.stdout
    assert run("--config", str(as_toml)).stdout == flags.stdout


def test_a_bad_config_file_is_refused_naming_the_key(tmp_path):
    typo = tmp_path / "typo.json"
    typo.write_text(json.dumps({"sesions": 1000, "user_pubs": 1}))
    result = run("--config", str(typo))
    assert result.returncode == 2
    assert "'sesions' is not a setting" in result.stderr
    bad = tmp_path / "bad.toml"
    bad.write_text('sessions = 1000\nuser_pubs = "many"\n')
    result = run("--config", str(bad))
    assert result.returncode == 2
    assert "user_pubs: --user-pubs: must be a number" in result.stderr
    result = run("--config", str(tmp_path / "missing.json"))
    assert result.returncode == 2
    assert result.stderr.startswith("error: --config: cannot read")


def test_json_output_has_both_modes_and_every_tier():
    result = run(*FIELD, "--json")
    assert result.returncode == 0, result.stderr
    out = json.loads(result.stdout)
    assert [r["mode"] for r in out["results"]] == ["fanout", "targeted"]
    for r in out["results"]:
        assert set(r["nodes"]) == {"edges", "roots", "routers", "redis_masters", "proxies"}
        assert r["nodes"]["edges"] == 21
    fanout, targeted = out["results"]
    # targeted routing only ever lowers what an edge receives and what the roots do
    assert targeted["edge"]["received"] < fanout["edge"]["received"]
    assert targeted["root_cores"] < fanout["root_cores"]
