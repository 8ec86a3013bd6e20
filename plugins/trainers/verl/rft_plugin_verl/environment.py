"""Is veRL installed here in a form the ``verl`` trainer can drive? Checked at validation.

veRL 0.9.1 pins ``transformers<5.11`` and ``tensordict<=0.10`` while vLLM 0.32 (and rft)
need ``transformers>=5.16``; it is installed without its dependencies next to rft (see the
plugin's README and ``requirements/verl-trainer.txt``). What its engine workers then need
besides is checked here from package metadata only (nothing is imported, validation stays
fast), each missing or incompatible piece one line naming the package and the fix.
"""

from __future__ import annotations

import importlib.util
from importlib import metadata

from packaging.version import Version

VERL_VERSION = "0.9.1"
"""The veRL release this adapter is written and tested against."""

INSTALL = "pip install --no-deps -r requirements/verl-trainer.txt (see plugins/trainers/verl/README.md)"
"""How to install veRL and what its workers import, next to rft."""

REQUIRED: tuple[tuple[str, str], ...] = (
    ("tensordict", "veRL's batches"),
    ("hydra-core", "veRL builds its worker configs with hydra.utils.instantiate"),
    ("codetiming", "veRL's workers time their steps with it"),
    ("psutil", "veRL's workers report memory with it"),
    ("peft", "veRL's FSDP engine imports it"),
)
"""Distributions veRL's engine workers import that its ``--no-deps`` install leaves out,
and why each is needed."""

TRL_WITHOUT_VALUE_HEAD = Version("1.13")
"""trl removed ``trl.experimental.ppo.AutoModelForCausalLMWithValueHead`` in 1.13; veRL
0.9.1's ``apply_monkey_patch`` imports it whenever trl is installed, for every model."""


def _version(distribution: str) -> str | None:
    try:
        return metadata.version(distribution)
    except metadata.PackageNotFoundError:
        return None


def problems() -> list[str]:
    """What keeps veRL's engine workers from running here (one line each, no key prefix);
    empty when nothing does."""
    verl = _version("verl")
    if verl is None or importlib.util.find_spec("verl") is None:
        return [(f"trainer_type 'verl' needs veRL {VERL_VERSION}, which is not installed: "
                 f"{INSTALL}")]
    found: list[str] = []
    if Version(verl) != Version(VERL_VERSION):
        found.append(f"trainer_type 'verl' is written for veRL {VERL_VERSION}, but veRL {verl} "
                     f"is installed: pip install --no-deps verl=={VERL_VERSION}")
    for distribution, why in REQUIRED:
        if _version(distribution) is None:
            found.append(f"trainer_type 'verl' needs {distribution} ({why}), which is not "
                         f"installed: {INSTALL}")
    hydra = _version("hydra-core")
    omegaconf = _version("omegaconf")
    if hydra is not None and omegaconf is not None and Version(hydra) < Version("1.4.0rc1") \
            and Version(omegaconf) >= Version("2.4"):
        found.append(f"hydra-core {hydra} does not work with omegaconf {omegaconf} (it needs "
                     "omegaconf<2.4 and antlr4 4.9): install hydra-core 1.4 with omegaconf "
                     f"2.4.1: {INSTALL}")
    trl = _version("trl")
    if trl is not None and Version(trl) >= TRL_WITHOUT_VALUE_HEAD:
        found.append(f"veRL {VERL_VERSION} cannot build models next to trl {trl}: it imports "
                     "AutoModelForCausalLMWithValueHead, which trl removed in 1.13; uninstall "
                     "trl (pip uninstall trl) or install trl<1.13")
    return found
