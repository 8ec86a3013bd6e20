"""Which rows of a batch each mini- and micro-batch of a
:class:`~rft.trainer.torch_trainer.TorchTrainer` step holds, and this rank's share of them
(:mod:`rft.trainer.parallel` says how the shares are formed)."""

from __future__ import annotations

import torch

from rft.algorithm import AlgorithmPreset
from rft.trainer.batching import TensorBatch, split_by_tokens, split_fixed, unit_rows
from rft.trainer.layout_memo import LayoutMemo
from rft.trainer.options import TorchTrainerOptions
from rft.trainer.parallel import RankGroup, balance_units

MicroPlan = list[tuple[list[int], bool]]
"""This rank's micro-batches of a mini-batch: ``(rows, real)``; ``real`` false marks a
dummy micro-batch (loss × 0) that keeps the ranks' collectives in step."""


class RowPlanning:
    """Mixin of :class:`~rft.trainer.torch_trainer.TorchTrainer`: the row plan of a step
    from the algorithm's batch layout, the trainer options and the rank group."""

    preset: AlgorithmPreset
    options: TorchTrainerOptions
    ranks: RankGroup | None
    layouts: LayoutMemo
    """The shared-prefix layouts of the step's rows, built once for all its forwards."""

    @property
    def is_rank0(self) -> bool:
        return self.ranks is None or self.ranks.rank == 0

    def _units(self, num_rows: int) -> list[list[int]]:
        return unit_rows(num_rows, self.preset.batch_layout.unit_size)

    def _mini_batches(self, tensors: TensorBatch) -> list[list[int]]:
        return split_fixed(self._units(len(tensors)), self.options.mini_batch_size)

    def _micro_batches(self, tensors: TensorBatch, rows: list[int]) -> list[list[int]]:
        unit = self.preset.batch_layout.unit_size
        units = [rows[i: i + unit] for i in range(0, len(rows), unit)]
        if self.options.use_dynamic_bsz:
            return split_by_tokens(units, tensors.sequence_lengths(), self.options.max_token_len)
        return split_fixed(units, self.options.micro_batch_size)

    def _all_micro_batches(self, tensors: TensorBatch) -> list[list[int]]:
        return [micro for mini in self._mini_batches(tensors)
                for micro in self._micro_batches(tensors, mini)]

    def _rank_rows(self, tensors: TensorBatch, rows: list[int]) -> list[int]:
        """This rank's share of ``rows`` (all of them in one process)."""
        if self.ranks is None:
            return rows
        unit = self.preset.batch_layout.unit_size
        units = [rows[i: i + unit] for i in range(0, len(rows), unit)]
        shares = balance_units(units, tensors.sequence_lengths(), self.ranks.world_size)
        return shares[self.ranks.rank]

    def _my_micro_batches(self, tensors: TensorBatch, rows: list[int]) -> MicroPlan:
        """This rank's micro-batches of the (global) ``rows``, padded with dummies to the
        largest count over the ranks (see :mod:`rft.trainer.parallel`)."""
        if self.ranks is None:
            return [(micro, True) for micro in self._micro_batches(tensors, rows)]
        mine = self._rank_rows(tensors, rows)
        plan: MicroPlan = [(m, True) for m in self._micro_batches(tensors, mine)] if mine else []
        count = self.ranks.max_int(len(plan))
        dummy = rows[: self.preset.batch_layout.unit_size]
        return plan + [(dummy, False)] * (count - len(plan))

    def _my_inference_batches(self, tensors: TensorBatch) -> MicroPlan:
        """This rank's micro-batches for a forward pass over the whole batch."""
        if self.ranks is None:
            return [(micro, True) for micro in self._all_micro_batches(tensors)]
        return self._my_micro_batches(tensors, list(range(len(tensors))))

    def _gather_rows(self, out: torch.Tensor, what: str) -> torch.Tensor:
        """Every rank filled its own rows of ``out`` (zeros elsewhere): the sum over the
        ranks is the whole tensor, exactly."""
        if self.ranks is None:
            return out
        return self.ranks.sum_tensor(out, what)
