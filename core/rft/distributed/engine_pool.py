"""Several rollout engines behind one engine (``explorer.rollout_model.engine_num > 1``).

Each replica is a Ray actor holding one engine of the configured type (on GPUs with
``tensor_parallel_size`` GPUs of its own). :class:`EnginePool` is an
:class:`~rft.engines.engine.InferenceEngine` itself, so the explorer, its model wrapper
and the workflows use it like a single engine:

- ``generate`` / ``compute_logprobs`` split the call's prompts into one contiguous chunk
  per replica and run the chunks at once; results come back in prompt order. Chunk ``j``
  samples with seed ``seed + j`` (with one chunk: exactly a single engine's call). The
  replica of chunk 0 turns with every call (round robin), so calls of fewer prompts than
  replicas — an auxiliary model's one-prompt calls — are spread over all of them (the
  replicas hold the same weights: which one serves a chunk does not change its result).
- ``generate_mm`` / ``compute_logprobs_mm`` (prompts with images, a vision-language model)
  are split the same way; each :class:`~rft.multimodal.VisionPrompt` or
  :class:`~rft.multimodal.MultiModalInputs` travels to its replica pickled (tensors as raw
  buffers, :mod:`rft.tensor_wire`). ``render_mm`` runs on the next replica in turn (its
  processor); ``accepts_images`` is the replicas' answer, asked once.
- ``update_weights`` puts the tensors in the object store once and loads them into every
  replica in parallel; the pool's ``model_version`` changes when all have them. With
  ``sync_method: nccl`` each replica (or each of its workers) is a rank of the trainer's
  broadcast group (:mod:`rft.distributed.weight_broadcast`) and receives the weights itself.
"""

from __future__ import annotations

import dataclasses
import itertools
import logging
from collections.abc import Callable, Iterable, Sequence
from typing import Any

import torch

from rft.adapter import AdapterWeights
from rft.config.schema import RftConfig
from rft.device_check import check_actor_device
from rft.host_memory import retain_freed_memory
from rft.distributed.actor_env import set_explorer_env
from rft.distributed.placement import auxiliary_placement, on_gpus
from rft.distributed.weight_broadcast import Broadcast, EngineEnd, GroupAddress
from rft.rollout.auxiliary import AuxiliaryEngineBuilder
from rft.engines.engine import Completion, InferenceEngine, SamplingArgs
from rft.engines.engine_factory import build_engine
from rft.errors import RftError
from rft.modes.builders import quiet_libraries
from rft.multimodal.inputs import MultiModalInputs, VisionPrompt
from rft.tensor_wire import NamedTensors

log = logging.getLogger("rft.distributed.engine_pool")


class EngineReplica:
    """What one engine actor runs: an engine built from the stage's config."""

    def __init__(self, config: RftConfig, engine_cls: type[InferenceEngine]) -> None:
        quiet_libraries()
        retain_freed_memory()
        set_explorer_env(config)
        check_actor_device(f"engine actor of {config.model.model_path!r}")
        self.engine = build_engine(config, engine_cls)
        self.broadcast_end = EngineEnd(self.engine)
        self.calls = 0
        """``generate`` / ``compute_logprobs`` calls served."""

    def served(self) -> int:
        return self.calls

    def settings(self) -> dict[str, Any]:
        """What the pool needs to act as this engine: limits, template, tokenizer, EOS."""
        e = self.engine
        return {"max_model_len": e.max_model_len, "max_prompt_tokens": e.max_prompt_tokens,
                "max_response_tokens": e.max_response_tokens,
                "enable_prompt_truncation": e.enable_prompt_truncation,
                "chat_template": e.chat_template, "enable_thinking": e.enable_thinking,
                "seed": e.seed, "tokenizer": e.tokenizer, "eos_token_ids": e.eos_token_ids}

    def accepts_images(self) -> bool:
        return self.engine.accepts_images()

    def generate(self, prompts: list[list[int]], sampling: SamplingArgs,
                 n: int) -> list[list[Completion]]:
        self.calls += 1
        return self.engine.generate(prompts, sampling, n)

    def compute_logprobs(self, token_ids: list[list[int]], prompt_lengths: list[int],
                         temperature: float) -> list[torch.Tensor]:
        self.calls += 1
        return self.engine.compute_logprobs(token_ids, prompt_lengths, temperature=temperature)

    def render_mm(self, messages: list[dict[str, Any]], images: list[Any],
                  add_generation_prompt: bool) -> VisionPrompt:
        return self.engine.render_mm(messages, images,
                                     add_generation_prompt=add_generation_prompt)

    def generate_mm(self, prompts: list[VisionPrompt], sampling: SamplingArgs,
                    n: int) -> list[list[Completion]]:
        self.calls += 1
        return self.engine.generate_mm(prompts, sampling, n)

    def compute_logprobs_mm(self, token_ids: list[list[int]], prompt_lengths: list[int],
                            inputs: list[MultiModalInputs | None],
                            temperature: float) -> list[torch.Tensor]:
        self.calls += 1
        return self.engine.compute_logprobs_mm(token_ids, prompt_lengths, inputs,
                                               temperature=temperature)

    def update_weights(self, weights: list[tuple[str, torch.Tensor]], version: int) -> int:
        self.engine.update_weights(iter(weights), version=version)
        return self.engine.model_version

    def update_adapter(self, adapter: AdapterWeights, version: int) -> int:
        self.engine.update_adapter(adapter, version)
        return self.engine.model_version

    def weight_group_ranks(self) -> int:
        return self.broadcast_end.weight_group_ranks()

    def join_weight_group(self, address: GroupAddress, first_rank: int) -> None:
        self.broadcast_end.join_weight_group(address, first_rank)

    def receive_broadcast(self, broadcast: Broadcast, version: int) -> int:
        self.broadcast_end.receive_broadcast(broadcast, version)
        return self.engine.model_version

    def close(self) -> None:
        self.broadcast_end.close()
        close = getattr(self.engine, "close", None)
        if close is not None:
            close()


def chunks(count: int, parts: int) -> list[range]:
    """``count`` items in ``min(parts, count)`` contiguous, near-equal ranges."""
    parts = max(1, min(parts, count))
    size, extra = divmod(count, parts)
    bounds, start = [], 0
    for j in range(parts):
        end = start + size + (1 if j < extra else 0)
        bounds.append(range(start, end))
        start = end
    return bounds


def replica_results(refs: list[Any]) -> list[Any]:
    """``ray.get`` of replica calls; an :class:`RftError` a replica raised (a prompt over
    the limit, a text model given images) is raised here as its own one line, not inside
    Ray's traceback of the actor."""
    import ray
    from ray.exceptions import RayTaskError

    try:
        return list(ray.get(refs))
    except RayTaskError as exc:
        if isinstance(exc.cause, RftError):
            raise RftError(str(exc.cause)) from None
        raise


def first_ranks(ranks: Sequence[int], start: int) -> list[int]:
    """First group rank of each member taking ``ranks[j]`` consecutive ranks from
    ``start`` on: ``start + Σ_{i<j} ranks_i``."""
    firsts, rank = [], start
    for count in ranks:
        firsts.append(rank)
        rank += count
    return firsts


class EnginePool(InferenceEngine):
    """``replicas`` engine actors used as one engine (see the module docstring).

    :param config: the validated stage config (each replica builds its engine from it).
    :param engine_cls: the engine plugin's class.
    :param replicas: number of engine actors.
    :param gpus_per_replica: GPUs Ray gives each actor (0 on CPU).
    """

    def __init__(self, config: RftConfig, engine_cls: type[InferenceEngine], replicas: int,
                 gpus_per_replica: float = 0) -> None:
        import ray

        actor = ray.remote(EngineReplica).options(num_cpus=0, num_gpus=gpus_per_replica)
        # Ray actor handles: their methods' .remote is made at run time (not in Ray's types)
        self.replicas: list[Any] = [actor.remote(config, engine_cls) for _ in range(replicas)]
        settings = ray.get([r.settings.remote() for r in self.replicas])[0]
        self._tokenizer = settings.pop("tokenizer")
        eos = settings.pop("eos_token_ids")
        super().__init__(**settings)
        self._accepts_images = bool(ray.get(self.replicas[0].accepts_images.remote()))
        self.eos_token_ids = list(eos)
        self._ranks: list[int] | None = None
        self._turns = itertools.count()
        self.model_path = config.explorer.rollout_model.model_path or config.model.model_path
        """The model the replicas serve (for logs)."""

    def _rotated(self) -> list[Any]:
        """The replicas, starting with the next one in turn (round robin over calls)."""
        start = next(self._turns) % len(self.replicas)
        return self.replicas[start:] + self.replicas[:start]

    def served(self) -> list[int]:
        """Calls each replica has served, in replica order."""
        import ray

        return [int(calls) for calls in ray.get([r.served.remote() for r in self.replicas])]

    @property
    def tokenizer(self) -> Any:
        return self._tokenizer

    def generate(self, prompt_token_ids: Sequence[Sequence[int]], sampling: SamplingArgs,
                 n: int = 1) -> list[list[Completion]]:
        return self._sample(lambda replica: replica.generate,
                            [list(p) for p in prompt_token_ids], sampling, n)

    def _sample(self, method: Callable[[Any], Any], prompts: list[Any],
                sampling: SamplingArgs, n: int) -> list[list[Completion]]:
        """``method(replica).remote(chunk, sampling, n)`` over one contiguous chunk of
        ``prompts`` per replica, chunk ``j`` with seed ``seed + j``; results in prompt
        order."""
        if not prompts:
            return []
        seed = self.next_seed(sampling)
        calls = [method(replica).remote([prompts[i] for i in part],
                                        dataclasses.replace(sampling, seed=seed + j), n)
                 for j, (replica, part) in enumerate(zip(self._rotated(),
                                                         chunks(len(prompts), len(self.replicas)),
                                                         strict=False))]
        return [group for result in replica_results(calls) for group in result]

    def compute_logprobs(self, token_ids: Sequence[Sequence[int]],
                         prompt_lengths: Sequence[int], *,
                         temperature: float = 1.0) -> list[torch.Tensor]:
        return self._score(lambda replica: replica.compute_logprobs,
                           [[list(t) for t in token_ids], list(prompt_lengths)], temperature)

    def _score(self, method: Callable[[Any], Any], columns: list[list[Any]],
               temperature: float) -> list[torch.Tensor]:
        """``method(replica).remote(*chunk_of_each_column, temperature)`` over one
        contiguous chunk of rows per replica (``columns``: equally long per-row lists);
        the log-probs in row order."""
        rows = len(columns[0])
        if not rows:
            return []
        calls = [method(replica).remote(*[[column[i] for i in part] for column in columns],
                                        temperature)
                 for replica, part in zip(self._rotated(), chunks(rows, len(self.replicas)),
                                          strict=False)]
        return [logps for result in replica_results(calls) for logps in result]

    # ---- images (vision-language models; docs/multimodal.md) ----------------------------

    def accepts_images(self) -> bool:
        """The replicas' engines take images (asked once, when the pool starts)."""
        return self._accepts_images

    def render_mm(self, messages: Sequence[dict[str, Any]], images: Sequence[Any], *,
                  add_generation_prompt: bool = True) -> VisionPrompt:
        """The next replica in turn renders the conversation with its processor (the pool
        holds none); its :class:`VisionPrompt` comes back through the object store."""
        if not self._accepts_images:
            return super().render_mm(messages, images,
                                     add_generation_prompt=add_generation_prompt)
        replica = self._rotated()[0]
        (prompt,) = replica_results([replica.render_mm.remote(list(messages), list(images),
                                                              add_generation_prompt)])
        assert isinstance(prompt, VisionPrompt)
        return prompt

    def generate_mm(self, prompts: Sequence[VisionPrompt], sampling: SamplingArgs,
                    n: int = 1) -> list[list[Completion]]:
        """:meth:`generate` for prompts with images: one contiguous chunk of prompts per
        replica, chunk ``j`` with seed ``seed + j``; results in prompt order."""
        if not self._accepts_images:
            return super().generate_mm(prompts, sampling, n)
        return self._sample(lambda replica: replica.generate_mm, list(prompts), sampling, n)

    def compute_logprobs_mm(self, token_ids: Sequence[Sequence[int]],
                            prompt_lengths: Sequence[int],
                            inputs: Sequence[MultiModalInputs | None], *,
                            temperature: float = 1.0) -> list[torch.Tensor]:
        """:meth:`compute_logprobs` with each sequence's vision inputs, one chunk of
        sequences (with theirs) per replica."""
        if not self._accepts_images:
            return super().compute_logprobs_mm(token_ids, prompt_lengths, inputs,
                                               temperature=temperature)
        sequences, lengths, vision = [list(t) for t in token_ids], list(prompt_lengths), \
            list(inputs)
        if len(vision) != len(sequences):
            raise RftError(f"compute_logprobs_mm: {len(sequences)} sequences but "
                           f"{len(vision)} vision inputs")
        return self._score(lambda replica: replica.compute_logprobs_mm,
                           [sequences, lengths, vision], temperature)

    def update_weights(self, named_tensors: Iterable[tuple[str, torch.Tensor]],
                       version: int) -> None:
        import ray

        weights = ray.put(NamedTensors((name, tensor.detach().cpu())
                                       for name, tensor in named_tensors))
        ray.get([replica.update_weights.remote(weights, version) for replica in self.replicas])
        self._model_version = int(version)

    serves_lora = True  # as its engine class does (validation checks that class)

    def update_adapter(self, adapter: AdapterWeights, version: int) -> None:
        """The adapter into every replica (put in the object store once)."""
        import ray

        boxed = ray.put(adapter)
        ray.get([replica.update_adapter.remote(boxed, version) for replica in self.replicas])
        self._model_version = int(version)

    def weight_group_ranks(self) -> int:
        """Ranks the replicas take in the broadcast group (each one per worker it has)."""
        return sum(self._replica_ranks())

    def _replica_ranks(self) -> list[int]:
        import ray

        if self._ranks is None:
            self._ranks = ray.get([r.weight_group_ranks.remote() for r in self.replicas])
        return self._ranks

    def join_weight_group(self, address: GroupAddress, first_rank: int = 1) -> None:
        """``sync_method: nccl``: the replicas join the trainer's group one after another,
        from ``first_rank`` on (replica ``j`` at ``first_rank + Σ_{i<j} ranks_i``)."""
        import ray

        starts = first_ranks(self._replica_ranks(), first_rank)
        ray.get([replica.join_weight_group.remote(address, start)
                 for replica, start in zip(self.replicas, starts, strict=True)])

    def receive_broadcast(self, broadcast: Broadcast, version: int) -> None:
        """Every replica receives the trainer's broadcast and loads it as ``version``."""
        import ray

        ray.get([replica.receive_broadcast.remote(broadcast, version)
                 for replica in self.replicas])
        self._model_version = int(version)

    def close(self) -> None:
        import ray

        try:
            ray.get([replica.close.remote() for replica in self.replicas], timeout=60)
            log.info("engine pool of %s: its %d replicas served %s calls", self.model_path,
                     len(self.replicas), ", ".join(map(str, self.served())))
        finally:
            for replica in self.replicas:
                ray.kill(replica)


def auxiliary_pools(config: RftConfig, own_actors: bool = False) -> AuxiliaryEngineBuilder:
    """The auxiliary models' engine builder of the modes on Ray: for ``engine_num > 1`` an
    :class:`EnginePool` of that many replicas (each with the model's
    ``tensor_parallel_size`` GPUs when the cluster has GPUs, none on CPU), its calls spread
    over them in turn; else one engine in this process (a remote engine: one client).
    ``own_actors`` (mode ``both``, whose explorer actor holds the rollout engine's GPUs): on
    GPUs one engine is an actor with GPUs of its own too
    (:func:`~rft.distributed.placement.auxiliary_placement`)."""

    def build(aux_config: RftConfig, engine_cls: type[InferenceEngine],
              engine_num: int) -> InferenceEngine:
        replicas, each = auxiliary_placement(
            engine_num, aux_config.explorer.rollout_model.tensor_parallel_size,
            remote=bool(engine_cls.remote), gpus=on_gpus(config), own_actors=own_actors)
        if replicas == 0:
            return build_engine(aux_config, engine_cls)
        return EnginePool(aux_config, engine_cls, replicas, each)

    return build
