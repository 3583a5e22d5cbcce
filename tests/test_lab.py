"""The lab in quick mode: every experiment's structural claims hold on both backends.

Figures (times, peaks) vary by machine; what each test asserts is the shape the article
found: duplicates or none, jobs lost or none, livelock, overlap, runs per replica, and
the peak that jitter removes.
"""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

import pytest
from click.testing import CliRunner

from sqljobs.cli import Deferred, cli
from sqljobs.cli.cmd_lab import lab
from sqljobs.errors import ConfigurationError
from sqljobs.lab import e1_claim, results
from sqljobs.lab.runner import experiment, select


def run(name: str, url: str) -> results.Result:
    result = experiment(name)(url, quick=True)
    failed = [c.text for c in result.claims if not c.held]
    assert not failed, failed
    return result


def test_e1_only_the_two_statement_claim_runs_jobs_twice(url: str) -> None:
    r = run("E1", url)
    assert r.row("SELECT then").ours["duplicates"] > 0
    for prefix in ("conditional", "sqljobs"):
        assert r.row(prefix).ours["duplicates"] == 0
        assert r.row(prefix).ours["effects"] == 200
    # one claim and one completion per job, each worker's last claim finding the queue
    # drained, and any claim that came back empty while jobs were pending (counted)
    ours = r.row("sqljobs").ours
    wasted = int(ours["empty claims"])
    assert ours["statements"] == 2 * ours["effects"] + e1_claim.WORKERS + wasted


@pytest.mark.slow
@pytest.mark.processes
def test_e2_a_sigkill_loses_jobs_without_a_lease_and_none_with_one(url: str) -> None:
    r = run("E2", url)
    a1, a2 = r.row("A1").ours, r.row("A2").ours
    assert a1["stuck running"] > 0 and a1["done"] < 40
    assert (a2["done"], a2["stuck running"]) == (40, 0)


@pytest.mark.slow
def test_e3_a_lease_shorter_than_the_job_livelocks(url: str) -> None:
    r = run("E3", url)
    for key in ("B1 ", "B2 "):
        assert r.row(key).ours["done"] == 0 and r.row(key).ours["duplicates"] > 0
    for key in ("B3", "B4"):
        assert (r.row(key).ours["done"], r.row(key).ours["duplicates"]) == (24, 0)
    assert r.row("B1+").ours["dead"] == 24


@pytest.mark.processes
def test_e4_only_a_unique_marker_in_the_charge_transaction_charges_once(url: str) -> None:
    r = run("E4", url)
    charges = {row.variant[:2]: row.ours["charges"] for row in r.rows}
    assert charges["C1"] == charges["C2"] == 5
    assert charges["C3"] > 1
    assert charges["C4"] == charges["C6"] == 1
    assert charges["C5"] == 0 and r.row("C5").ours["jobs done"] == 1


@pytest.mark.slow
@pytest.mark.processes
def test_e6_full_jitter_flattens_the_retry_peak(url: str) -> None:
    r = run("E6", url)
    f1, f2, f3 = (row.ours for row in r.rows)
    assert f1["attempts"] == f2["attempts"] == f3["attempts"] == 600  # 150 jobs x 4
    assert 3 * f3["peak in 100 ms"] < 2 * min(f1["peak in 100 ms"], f2["peak in 100 ms"])


@pytest.mark.slow
@pytest.mark.processes
def test_e7_sigterm_drains_and_loses_nothing(url: str) -> None:
    r = run("E7", url)
    assert r.row("V1").ours["interrupted"] > 0
    assert (r.row("V2").ours["interrupted"], r.row("V2").ours["left running"]) == (0, 0)
    assert r.row("V3").ours["left running"] == 0


@pytest.mark.slow
def test_e8_change_signals_beat_polling(url: str) -> None:
    r = run("E8", url)
    ours = r.row("sqljobs worker,").ours
    assert ours["p50 ms"] < r.row("plain polling every 50 ms").ours["p50 ms"]
    assert ours["idle queries/s"] <= 1.5
    assert r.row("plain polling every 10 ms").ours["idle queries/s"] > 50


@pytest.mark.slow
def test_e9_batching_cuts_statements(url: str) -> None:
    r = run("E9", url)
    assert r.rows[3].ours["statements"] < r.rows[2].ours["statements"]


@pytest.mark.slow
@pytest.mark.processes
def test_e10_a_workflow_repeats_only_the_effects_killed_before_their_checkpoint(
    url: str,
) -> None:
    r = run("E10", url)
    w, n1, n2 = (r.row(key).ours for key in ("W ", "N1 ", "N2 "))
    assert (w["kills"], w["state"], w["result ok"]) == (13, "done", True)
    assert w["effects per step"] == [2] * 6 and w["checkpointed per step"] == [1] * 6
    assert (w["repeated"], w["killed before ckpt"], w["after ckpt"]) == (6, 6, 0)
    assert w["repeats are the kills before ckpt"] and w["cut mid-way"] == 6
    assert w["tx rows"] == 1 and w["tx block runs"] == 8  # killed, committed, 6 replays
    assert (n1["kills"], n1["state"], n1["effects per step"]) == (3, "dead", [2, 0, 0, 0, 0, 0])
    assert (n2["kills"], n2["state"], n2["result ok"]) == (13, "done", True)
    # every retry re-ran the effects before the kill point that ended it
    assert n2["effects per step"] == [13, 11, 9, 6, 4, 2] and n2["repeated"] == 39
    assert n2["tx rows"] == 7
    assert r.claims[-1].text.startswith("verdict: killed at the same 13 points")


def test_select_expands_all_and_rejects_unknown_names() -> None:
    assert select(["all"])[0] == "E1" and len(select([])) == 10
    assert select(["all"])[-1] == "E10"
    assert select(["e2", "E1"]) == ["E2", "E1"]
    with pytest.raises(
        ConfigurationError, match=r"unknown experiment 'E11'; choose from E1, .*, E10 or all"
    ):
        select(["E11"])


def test_the_command_prints_json_and_writes_a_chart(tmp_path: Path) -> None:
    pytest.importorskip("matplotlib")
    db = tmp_path / "lab.db"
    out = CliRunner().invoke(
        cli,
        ["lab", "E9", "--quick", "--json", "--url", f"sqlite:///{db}", "--charts",
         str(tmp_path / "charts")],
    )  # fmt: skip
    assert out.exit_code == 0, out.output
    doc = json.loads(out.stdout)
    assert doc["backend"] == "sqlite" and doc["experiments"][0]["id"] == "E9"
    assert all(c["held"] for c in doc["experiments"][0]["claims"])
    assert (tmp_path / "charts" / "e9.png").stat().st_size > 0


def test_an_unknown_experiment_is_a_usage_error() -> None:
    out = CliRunner().invoke(cli, ["lab", "E42"])
    assert out.exit_code == 2 and "E42" in out.output


@pytest.mark.slow
@pytest.mark.processes
def test_e5_three_replicas_run_each_tick_once_and_skip_prevents_overlap(url: str) -> None:
    r = run("E5", url)
    ticker, once, allow, skip, from_now = (row.ours for row in r.rows)
    assert ticker["runs"] >= 3 * 15 - 3 and ticker["per replica"][0] >= 14
    assert 14 <= once["runs"] <= 16 and len(once["per replica"]) >= 2
    assert allow["overlapping"] > 0 and skip["overlapping"] == 0
    assert from_now["tick drift ms"] > 0 and from_now["overlapping"] > 0  # the article's D4
    assert all(claim.held for claim in r.claims)


@pytest.mark.processes
def test_only_the_lab_command_imports_the_lab() -> None:
    """`sqljobs --help` and every other command leave the lab's 2,400 lines unloaded."""
    script = (
        "import sys\n"
        "from click.testing import CliRunner\n"
        "from sqljobs.cli import cli\n"
        "for args in (['--help'], ['jobs', '--help'], ['stats', '--help']):\n"
        "    assert CliRunner().invoke(cli, args).exit_code == 0, args\n"
        "print(sorted(m for m in sys.modules if m.startswith('sqljobs.lab')))\n"
    )
    out = subprocess.run(
        [sys.executable, "-c", script], capture_output=True, text=True, check=True, timeout=60
    )
    assert out.stdout.strip() == "[]", out.stdout + out.stderr


def test_the_deferred_lab_command_lists_the_real_ones_help() -> None:
    listed = cli.commands["lab"]
    assert isinstance(listed, Deferred)
    real = listed.load()
    assert real is lab
    assert listed.get_short_help_str(200) == real.get_short_help_str(200)
    top = CliRunner().invoke(cli, ["--help"])
    assert "lab" in top.output and "Re-run the article's experiments" in top.output
    own = CliRunner().invoke(cli, ["lab", "--help"])
    assert own.exit_code == 0 and "--quick" in own.output
