"""The policy's entropies and expected entropy signals from veRL's own log-prob pass, for
advantage fns that declare ``needs_entropy`` / ``needs_expected_entropy_signal``
(:mod:`rft.contracts`; Clip_B, Clip_V).

- Entropies ``H = −Σ_v p_v log p_v`` ``(B, T)``: veRL 0.9.1's ``compute_log_prob`` with
  ``calculate_entropy=True`` (its engine's ``entropy_from_logits`` on the
  temperature-scaled logits).
- Expected entropy signals ``N = Σ_v p_v² (log p_v + H)`` ``(B, T)``
  (:func:`rft.ops.expected_entropy_signal_from_logits`, the torch trainer's function): veRL's
  FSDP engine has one per-token statistic of the full logits it can be asked for,
  ``calculate_sum_pi_squared`` (``Σ_v p_v²`` via ``verl.utils.torch_functional.
  calculate_sum_pi_squared_from_logits``, output ``sum_pi_squared``). During the pass,
  :func:`expected_signal_as_sum_pi_squared` has the engine call rft's function in that
  statistic's place, so veRL's own layout code (temperature, padding removal, sequence
  parallel gather, nested rows) carries ``N`` out under that name. It acts in the process
  that runs the engine (this one with one rank, each rank's worker with several) and only
  during that call. veRL's Megatron engine computes ``Σ p²`` with its own vocab-parallel
  kernel, which this does not reach: the trainer refuses such fns with
  ``trainer_strategy: megatron``.
"""

from __future__ import annotations

import contextlib
from collections.abc import Iterator

from rft.ops import expected_entropy_signal_from_logits

SIGNAL_KEY = "sum_pi_squared"
"""veRL's output key that carries the expected entropy signals during the pass."""


@contextlib.contextmanager
def expected_signal_as_sum_pi_squared() -> Iterator[None]:
    """While open, veRL's FSDP engine computes
    :func:`rft.ops.expected_entropy_signal_from_logits` where it would compute ``Σ_v p_v²``
    (a batch asking ``calculate_sum_pi_squared=True`` gets ``N`` under
    :data:`SIGNAL_KEY`); restored on exit."""
    import verl.utils.torch_functional as verl_F

    original = verl_F.calculate_sum_pi_squared_from_logits
    verl_F.calculate_sum_pi_squared_from_logits = expected_entropy_signal_from_logits
    try:
        yield
    finally:
        verl_F.calculate_sum_pi_squared_from_logits = original
