"""The alert rules are proven by `promtool test rules` (infra/tests/*_test.yml), and every alert has a
case that fires it and one where it must stay quiet.

promtool comes with Debian's `prometheus` package (.ci/run installs it). Where it is absent these tests skip
and say so, except under EPISODIC_REQUIRE_PROMETHEUS=1 (set by .ci/run), where a missing binary fails.
"""

from __future__ import annotations

import subprocess
from pathlib import Path

import yaml

from tests.prom_tools import require_binary

INFRA = Path(__file__).resolve().parents[2] / "infra"
RULES = INFRA / "alerts.yml"
RULE_TESTS = sorted((INFRA / "tests").glob("*_test.yml"))


def _promtool() -> str:
    return require_binary("promtool")


def _run(*args: str) -> subprocess.CompletedProcess[str]:
    return subprocess.run([_promtool(), *args], capture_output=True, text=True, timeout=120, check=False)


def _alerts() -> set[str]:
    doc = yaml.safe_load(RULES.read_text())
    return {r["alert"] for g in doc["groups"] for r in g["rules"] if "alert" in r}


def test_every_alert_has_a_case_that_fires_it_and_one_that_must_not() -> None:
    assert len(RULE_TESTS) >= 2, RULE_TESTS
    fires: set[str] = set()
    quiet: set[str] = set()
    for path in RULE_TESTS:
        doc = yaml.safe_load(path.read_text())
        assert doc["rule_files"] == ["../alerts.yml"], path
        for case in doc["tests"]:
            assert case["name"] and case["input_series"], case
            for check in case["alert_rule_test"]:
                (fires if check["exp_alerts"] else quiet).add(check["alertname"])
    alerts = _alerts()
    assert not (fires | quiet) - alerts, f"tests of alerts that do not exist: {sorted((fires | quiet) - alerts)}"
    assert not alerts - fires, f"no case fires {sorted(alerts - fires)}"
    assert not alerts - quiet, f"no case keeps {sorted(alerts - quiet)} quiet"


def test_the_rules_pass_promtool_check() -> None:
    out = _run("check", "rules", str(RULES))
    assert out.returncode == 0, out.stdout + out.stderr
    assert f"{len(_alerts())} rules found" in out.stdout


def test_the_alert_rule_unit_tests_pass() -> None:
    out = _run("test", "rules", *map(str, RULE_TESTS))
    assert out.returncode == 0, out.stdout + out.stderr
    assert out.stdout.count("SUCCESS") == len(RULE_TESTS), out.stdout


def test_a_wrong_expectation_fails(tmp_path: Path) -> None:
    """The harness can fail: the same tests against rules with a raised threshold do not pass."""
    (tmp_path / "tests").mkdir()
    (tmp_path / "alerts.yml").write_text(
        RULES.read_text().replace("episodic_consumer_lag_records) > 1000", "episodic_consumer_lag_records) > 100000")
    )
    (tmp_path / "tests" / "alerts_test.yml").write_text((INFRA / "tests" / "alerts_test.yml").read_text())
    out = _run("test", "rules", str(tmp_path / "tests" / "alerts_test.yml"))
    assert out.returncode != 0
    assert "EpisodicConsumerLagHigh" in out.stdout + out.stderr


def test_the_prometheus_config_passes_promtool_check(tmp_path: Path) -> None:
    """infra/prometheus.yml, with its rule file pointed at infra/alerts.yml (the compose file mounts it)."""
    doc = yaml.safe_load((INFRA / "prometheus.yml").read_text())
    assert doc["rule_files"] == ["/etc/prometheus/alerts.yml"]
    doc["rule_files"] = [str(RULES)]
    cfg = tmp_path / "prometheus.yml"
    cfg.write_text(yaml.safe_dump(doc))
    out = _run("check", "config", str(cfg))
    assert out.returncode == 0, out.stdout + out.stderr
