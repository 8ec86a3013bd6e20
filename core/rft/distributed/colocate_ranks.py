"""Mode ``colocate`` on N devices (veRL's hybrid engine): N trainer ranks, each with its own
rollout engine on its device.

With ``trainer.ranks > 1`` (``cluster.node_num × gpu_per_node`` GPUs, or
``trainer.cpu_ranks`` on a CPU cluster) a colocated stage that explores runs the body and
the lifecycle of one device (:class:`rft.modes.colocate.ColocateStage`,
:mod:`rft.modes.stage`); only where its rollout engine lives changes, :class:`RankEngines`::

    driver (rft run)                        trainer rank r = 0 … N-1 (Ray actor, one device)
    explorer: selectors, workflows,         TorchTrainer shard (FSDP2, rft.trainer.ranks)
    rewards, experience buffer              rollout engine, built from the stage's config
    RankEngines.generate  ───────────────▶  rank r's share of the call's prompts
    RankedTrainer.train_step ────────────▶  every rank trains on its share of the batch
    RankEngines.sync(v)  ────────────────▶  every rank: the actor's whole tensors, one at a
                                            time (full_tensor of its FSDP2 shards), loaded
                                            into its own engine as they come

- **Exploring.** The explorer's engine calls are split over the ranks' engines: the
  prompts of a call in contiguous shares, one per rank (a call of one prompt with ``n``
  samples: the samples); share ``j`` samples with seed ``seed + j``, as
  :class:`~rft.distributed.engine_pool.EnginePool` does, so one rank reproduces a single
  engine. With ``explorer.concurrent_mode: multi-threading`` the calls of all the workflows
  of an explore step are merged into one (:mod:`rft.engines.call_batching`), so every
  rank explores its share of the step's batch.
- **Training.** Before each train step every engine that can releases its device memory
  (vLLM's sleep mode on CUDA, :mod:`rft.engines.engine_sleep`); the ranks then train
  together as in mode ``both``.
- **Weights.** After the step each rank gathers the actor tensor by tensor
  (``full_tensor()`` of its shards, over the trainer's own process group) and loads each
  into its engine as it comes (``update_weights`` of an iterator: one whole tensor at a
  time beyond the shards; a sleeping engine wakes its weights first, its KV cache after).
  No weight-broadcast group and nothing through the driver.

The placement is printed at start-up, the trainer's ranks and then the engines:
``rft: colocate on 2 devices: 2 trainer ranks, one 'hf' rollout engine in each (rank 0:
CPU, rank 1: CPU); …``. A train-only stage has nothing to explore: it keeps one engine in
the driver for evaluation (:class:`~rft.modes.colocate.LocalEngine`, weights gathered on
rank 0), as mode ``train`` does.
"""

from __future__ import annotations

import contextlib
import dataclasses
import logging
import os
import sys
import time
from collections.abc import Callable, Iterable, Iterator, Sequence
from typing import Any

import torch

from rft.chat_template import model_chat_template
from rft.config.plan import RunPlan
from rft.config.schema import RftConfig
from rft.distributed.engine_pool import EngineReplica, chunks
from rft.errors import RftError, ray_error_line
from rft.engines.engine import Completion, InferenceEngine, SamplingArgs
from rft.engines.engine_sleep import EngineSleep
from rft.synchronizer import counted_tensors
from rft.tensor_wire import NamedTensors
from rft.trainer.base import Trainer
from rft.trainer.ranks import RankedTrainer, TrainerRank

log = logging.getLogger("rft.distributed.colocate_ranks")

ENGINE = "colocated_engine"
"""A rank's engine (an :class:`EngineReplica`) in :attr:`TrainerRank.scratch`."""
SLEEP = "colocated_engine_sleep"
"""Its :class:`~rft.engines.engine_sleep.EngineSleep` in :attr:`TrainerRank.scratch`."""


def shares(prompts: int, n: int, ranks: int) -> list[tuple[range, int]]:
    """How a call of ``prompts`` prompts × ``n`` samples is split over ``ranks`` engines:
    ``(prompt indices, samples per prompt)`` of each engine that gets work, in rank order —
    the prompts in contiguous, near-equal shares; a single prompt's ``n`` samples split
    instead (so that one prompt still keeps several engines busy)."""
    if prompts == 1 and n > 1 and ranks > 1:
        return [(range(1), len(part)) for part in chunks(n, ranks)]
    return [(part, n) for part in chunks(prompts, ranks)]


class RankEngines(InferenceEngine):
    """The rollout engines of a sharded trainer's ranks, used as one engine by the explorer
    (see the module docstring). It is also the stage's
    :class:`~rft.modes.colocate.RolloutEngines`: the engines start in :meth:`attach`, once
    the trainer's ranks exist; until then nothing may call them.

    :param plan: the stage's run plan (each rank builds its engine from ``plan.config``).
    """

    def __init__(self, plan: RunPlan) -> None:
        config = plan.config
        rm = config.explorer.rollout_model
        super().__init__(seed=rm.seed)  # replaced by rank 0's engine settings in attach()
        self.config: RftConfig = config
        self.engine_cls = plan.rollout_model.engine.implementation
        self.engine_name = plan.rollout_model.engine.name
        self.model_path = rm.model_path or config.model.model_path
        self.trainer: RankedTrainer | None = None
        self.sleeps = False
        """Some rank's engine releases its device memory while the trainer steps."""
        self._tokenizer: Any = None

    # ---- RolloutEngines ----------------------------------------------------------------

    @property
    def engine(self) -> InferenceEngine:
        return self

    def make_room(self) -> None:
        """Nothing to do: each rank builds its engine after its trainer shard."""

    def attach(self, trainer: Trainer) -> None:
        """Build one engine in every rank of ``trainer``; take rank 0's settings (limits,
        chat template, tokenizer, EOS ids); print the placement."""
        if not isinstance(trainer, RankedTrainer):
            raise RftError(f"trainer.trainer_type: {self.config.trainer.trainer_type!r} has no "
                           f"ranks to hold rollout engines; mode 'colocate' on "
                           f"{self.config.trainer.ranks} devices needs the torch trainer")
        self.trainer = trainer
        started = trainer.call_all(_start_engine, self.config, self.engine_cls,
                                   what="starting the rollout engines")
        settings, _ = started[0]
        settings = dict(settings)
        self._tokenizer = settings.pop("tokenizer")
        eos = settings.pop("eos_token_ids")
        super().__init__(**settings)
        self.eos_token_ids = list(eos)
        self.sleeps = any(sleeps for _, sleeps in started)
        log.info("%s", self.placement())
        print(f"rft: {self.placement()}", file=sys.stderr, flush=True)

    @contextlib.contextmanager
    def training(self) -> Iterator[None]:
        """Engines with a sleep mode release their device memory for the train step."""
        if self.sleeps:
            self._trainer().call_all(_sleep_engine, what="putting the rollout engines to sleep")
        yield

    def sync(self, version: int) -> dict[str, float]:
        """Every rank loads the trainer's weights into its own engine as ``version``."""
        started = time.monotonic()
        moved = self._trainer().call_all(_load_trainer_weights, version,
                                         what=f"loading weights version {version} into the "
                                              "engines")
        self._model_version = int(version)
        return {"timing_s/update_weights": time.monotonic() - started,
                "sync/model_version": float(version), "sync/bytes": float(sum(moved))}

    def close(self) -> None:
        """Close the ranks' engines (before the trainer stops its ranks)."""
        trainer, self.trainer = self.trainer, None
        if trainer is None or not trainer.actors:
            return
        try:
            trainer.call_all(_close_engine, what="closing the rollout engines")
        except RftError:  # the ranks were stopped after a failure: nothing left to close
            pass

    def placement(self) -> str:
        """One line: ranks, the engine of each and its device, and what happens when."""
        trainer = self._trainer()
        devices = ", ".join(
            f"rank {p.rank}: {'GPU ' + ','.join(p.gpus) if p.gpus else 'CPU'}"
            for p in trainer.places)
        n = trainer.world_size
        return (f"colocate on {n} devices: {n} trainer ranks, one {self.engine_name!r} rollout "
                f"engine in each ({devices}); explore calls split over the {n} engines, each "
                f"rank loads the new weights into its engine after every step; engines sleep "
                f"while the trainer steps: {'yes' if self.sleeps else 'no'}")

    # ---- InferenceEngine -----------------------------------------------------------------

    @property
    def tokenizer(self) -> Any:
        """Rank 0's engine's tokenizer; before :meth:`attach` (the stage reads auxiliary
        buffers before the trainer starts) the model's, with the configured chat template."""
        if self._tokenizer is None:
            self._tokenizer = _model_tokenizer(self.config, self.model_path)
        return self._tokenizer

    def generate(self, prompt_token_ids: Sequence[Sequence[int]], sampling: SamplingArgs,
                 n: int = 1) -> list[list[Completion]]:
        prompts = [list(p) for p in prompt_token_ids]
        if not prompts:
            return []
        seed = self.next_seed(sampling)
        parts = shares(len(prompts), n, self._trainer().world_size)
        results = self._on_ranks(
            [(j, _generate, ([prompts[i] for i in part],
                             dataclasses.replace(sampling, seed=seed + j), count))
             for j, (part, count) in enumerate(parts)], "generate")
        if parts[0][1] != n:  # one prompt, its samples split
            return [[completion for result in results for completion in result[0]]]
        return [group for result in results for group in result]

    def compute_logprobs(self, token_ids: Sequence[Sequence[int]],
                         prompt_lengths: Sequence[int], *,
                         temperature: float = 1.0) -> list[torch.Tensor]:
        sequences, lengths = [list(t) for t in token_ids], list(prompt_lengths)
        if not sequences:
            return []
        parts = chunks(len(sequences), self._trainer().world_size)
        results = self._on_ranks(
            [(j, _compute_logprobs, ([sequences[i] for i in part], [lengths[i] for i in part],
                                     temperature))
             for j, part in enumerate(parts)], "compute_logprobs")
        return [logps for result in results for logps in result]

    def update_weights(self, named_tensors: Iterable[tuple[str, torch.Tensor]],
                       version: int) -> None:
        """Given weights into every rank's engine (put in the object store once); the
        stage's own syncs go through :meth:`sync` instead."""
        import ray

        weights = ray.put(NamedTensors((name, tensor.detach().cpu())
                                       for name, tensor in named_tensors))
        trainer = self._trainer()
        self._on_ranks([(r, _load_weights, (weights, version)) for r in range(trainer.world_size)],
                       "update_weights")
        self._model_version = int(version)

    # ---- calls on the ranks ----------------------------------------------------------------

    def _trainer(self) -> RankedTrainer:
        if self.trainer is None:
            raise RftError("colocate: the trainer ranks' rollout engines are not running")
        return self.trainer

    def _on_ranks(self, calls: list[tuple[int, Callable[..., Any], tuple[Any, ...]]],
                  what: str) -> list[Any]:
        """``fn(rank, *args)`` for each ``(rank, fn, args)`` at once; the results in order.
        An engine's own error (a prompt too long, …) is raised as it is, so the explorer
        treats it as a failed task; a rank that died is one line naming it."""
        import ray
        from ray.exceptions import RayActorError, RayTaskError

        actors = self._trainer().actors
        refs = [(rank, actors[rank].call.remote(fn, *args)) for rank, fn, args in calls]
        results = []
        for rank, ref in refs:
            try:
                results.append(ray.get(ref))
            except RayTaskError as exc:
                if exc.cause is not None:
                    raise exc.cause from None
                raise RftError(f"colocate: rollout engine of trainer rank {rank}, {what}: "
                               f"{ray_error_line(exc)}") from None
            except RayActorError as exc:
                raise RftError(f"colocate: trainer rank {rank} (with its rollout engine) died "
                               f"during {what}: {ray_error_line(exc)}") from None
        return results


def _model_tokenizer(config: RftConfig, model_path: str) -> Any:
    """The tokenizer an engine of ``config`` loads, with the model's chat template
    (:func:`rft.chat_template.model_chat_template`)."""
    from transformers import AutoTokenizer

    tokenizer = AutoTokenizer.from_pretrained(model_path,
                                              trust_remote_code=config.model.trust_remote_code)
    template = model_chat_template(config)
    if template is not None:
        tokenizer.chat_template = template
    return tokenizer


# ---- run on the trainer's ranks (RankedTrainer.call_all / TrainerRank.call) ---------------


def _start_engine(rank: TrainerRank, config: RftConfig,
                  engine_cls: type[InferenceEngine]) -> tuple[dict[str, Any] | None, bool]:
    """Build this rank's engine (with ``explorer.env_vars`` set in its process); return its
    settings (rank 0 only) and whether it sleeps while the trainer steps."""
    os.environ.update({key: str(value) for key, value in config.explorer.env_vars.items()})
    replica = EngineReplica(config, engine_cls)
    sleeper = EngineSleep(replica.engine)
    rank.scratch[ENGINE], rank.scratch[SLEEP] = replica, sleeper
    return (replica.settings() if rank.rank == 0 else None), sleeper.enabled


def _generate(rank: TrainerRank, prompts: list[list[int]], sampling: SamplingArgs,
              n: int) -> list[list[Completion]]:
    return rank.scratch[ENGINE].generate(prompts, sampling, n)


def _compute_logprobs(rank: TrainerRank, token_ids: list[list[int]], prompt_lengths: list[int],
                      temperature: float) -> list[torch.Tensor]:
    return rank.scratch[ENGINE].compute_logprobs(token_ids, prompt_lengths, temperature)


def _sleep_engine(rank: TrainerRank) -> None:
    rank.scratch[SLEEP].sleep()


def _load_trainer_weights(rank: TrainerRank, version: int) -> int:
    """The actor's whole tensors (``named_weights``: gathered one at a time from the shards,
    a collective every rank runs), straight into this rank's engine; with LoRA the adapter
    only (gathered on rank 0, then handed to every rank: it is small). Returns the bytes
    loaded."""
    if rank.plan.model.lora_configs:
        assert rank.group is not None
        adapter = rank.group.gather_objects(rank.trainer.adapter_weights(), "LoRA adapter")[0]
        rank.scratch[SLEEP].load(adapter, version)
        return int(adapter.nbytes)
    sizes: list[int] = []
    rank.scratch[SLEEP].load(counted_tensors(rank.trainer.named_weights(), sizes), version)
    return sum(sizes)



def _load_weights(rank: TrainerRank, weights: NamedTensors, version: int) -> None:
    rank.scratch[SLEEP].load(iter(weights), version)


def _close_engine(rank: TrainerRank) -> None:
    rank.scratch.pop(SLEEP, None)
    replica = rank.scratch.pop(ENGINE, None)
    if replica is not None:
        replica.close()


__all__ = ["RankEngines", "shares"]
