"""rft-plugin-verl: ``trainer_type: verl``, veRL 0.9.1's engine workers as rft's trainer.

Registered names:

- trainer ``verl`` (:class:`~rft_plugin_verl.trainer.VerlTrainer`): veRL's actor,
  reference and critic workers (FSDP / FSDP2 engines) drive each training step, while the
  loss maths stay rft's: the policy loss, KL and entropy functions resolved from the YAML
  are installed as veRL's loss-function hook (:mod:`~rft_plugin_verl.losses`) and the
  advantage function runs on the trainer's process, as veRL's driver runs its own.

Modules: :mod:`~rft_plugin_verl.environment` (is veRL installed and compatible),
:mod:`~rft_plugin_verl.keys` (which ``trainer.trainer_config`` keys reach veRL),
:mod:`~rft_plugin_verl.config` (rft's config → veRL's), :mod:`~rft_plugin_verl.batch`
(experiences → veRL's batch), :mod:`~rft_plugin_verl.losses` (the hooks),
:mod:`~rft_plugin_verl.cpu_platform` (rft's shim that runs veRL's workers on a CPU),
:mod:`~rft_plugin_verl.worker_group` (several trainer ranks: veRL's worker groups),
:mod:`~rft_plugin_verl.lora` (``model.lora_configs`` on veRL's peft path),
:mod:`~rft_plugin_verl.megatron` (``trainer_strategy: megatron``, GPU only, untested),
:mod:`~rft_plugin_verl.trainer`.

This module is imported on every ``rft`` start: the trainer (and with it torch) is
imported when ``register_trainers`` is called; veRL only when a trainer is built or a
config using it is validated.
"""

from __future__ import annotations

from typing import Any

from rft import hookimpl


@hookimpl
def register_trainers() -> dict[str, Any]:
    from rft_plugin_verl.trainer import VerlTrainer

    return {"verl": VerlTrainer}
