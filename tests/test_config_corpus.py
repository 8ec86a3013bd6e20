"""The malformed-config corpus: each case fails with exactly its one-line message.

The cases live in ``tests/data/configs/bad_configs.yaml``; each patches the valid
``base.yaml`` (or replaces it with raw text) and runs ``rft validate`` in-process. Two
cases also run as a real subprocess to show that no traceback reaches the user.
"""

from __future__ import annotations

import subprocess
import sys

import pytest

from config_corpus import BASE_CONFIG, CORPUS, prepare_environment, write_case
from rft.cli import main


@pytest.fixture
def env(tmp_path, monkeypatch, tiny_model_dir):
    prepare_environment(tmp_path, monkeypatch, tiny_model_dir)
    return tmp_path


def test_corpus_is_large_and_every_case_has_an_expectation():
    assert len(CORPUS) >= 30
    assert len({case["id"] for case in CORPUS}) == len(CORPUS)
    assert all(case.get("expect") for case in CORPUS)


def test_base_config_is_valid(env, capsys):
    assert main(["validate", str(BASE_CONFIG)]) == 0
    out, err = capsys.readouterr()
    assert "algorithm_type: grpo" in out
    assert err == ""


@pytest.mark.parametrize("case", CORPUS, ids=[case["id"] for case in CORPUS])
def test_malformed_config_gives_its_one_line_message(case, env, capsys):
    path = write_case(case, env)
    status = main(["validate", str(path), *case.get("overrides", [])])
    out, err = capsys.readouterr()
    assert status == 2
    assert out == ""
    assert err == "rft: " + case["expect"].replace("{path}", str(path)) + "\n"


@pytest.mark.parametrize("case_id", ["yaml-syntax-error", "unknown-algorithm"])
def test_no_traceback_in_a_real_process(case_id, env):
    case = next(c for c in CORPUS if c["id"] == case_id)
    path = write_case(case, env)
    result = subprocess.run([sys.executable, "-m", "rft.cli", "validate", str(path)],
                            capture_output=True, text=True)
    assert result.returncode == 2
    assert result.stderr == "rft: " + case["expect"].replace("{path}", str(path)) + "\n"
    assert "Traceback" not in result.stderr


def test_debug_flag_shows_the_traceback(env):
    case = next(c for c in CORPUS if c["id"] == "unknown-algorithm")
    path = write_case(case, env)
    result = subprocess.run([sys.executable, "-m", "rft.cli", "validate", str(path),
                             "--debug"], capture_output=True, text=True)
    assert result.returncode != 0
    assert "Traceback" in result.stderr and "ConfigError" in result.stderr
