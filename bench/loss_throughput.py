"""rft's loss / advantage maths vs veRL 0.9.1's on CPU: time per call and ratio.

    OMP_NUM_THREADS=2 python bench/loss_throughput.py [--batch 2048] [--length 1024]

Prints, for GRPO advantages, the PPO (dual-clip) policy loss and the low_var_kl estimator,
the median time of a few repeats for veRL and for rft and the ratio ``veRL / rft`` (> 1:
rft is faster). Losses are timed forward + backward, float32, token-mean aggregation.
Torch uses the threads the environment gives it (``OMP_NUM_THREADS``). Needs veRL:
``pip install --no-deps -r requirements/verl-test.txt``, and rft-plugin-grpo
(``pip install -e plugins/algorithms/grpo``) for the GRPO advantage.
"""

from __future__ import annotations

import argparse
import statistics
import time
from collections.abc import Callable

import numpy as np
import torch
from omegaconf import OmegaConf
from verl.trainer.ppo import core_algos

from rft_plugin_grpo import GRPOArgs, grpo_advantages  # pip install -e plugins/algorithms/grpo
from rft.builtin.kl import KLArgs, k3
from rft.builtin.policy_loss import PPOArgs, ppo_policy_loss
from rft.contracts import AdvantageInputs, AggContext, KLInputs, PolicyLossInputs
from rft.ops import agg_loss


def _elapsed(fn: Callable[[], object]) -> float:
    start = time.perf_counter()
    fn()
    return time.perf_counter() - start


def median_times(verl_fn: Callable[[], object], rft_fn: Callable[[], object],
                 repeats: int, rounds: int = 3) -> tuple[float, float]:
    """Median seconds of each function, timed in blocks of ``repeats`` calls (steady state:
    the previous call of the *same* function warmed caches and the allocator, as in a
    training loop). ``rounds`` blocks each, the order alternating between rounds so that
    load from other processes hits both alike."""
    verl_times: list[float] = []
    rft_times: list[float] = []
    for round_ in range(rounds):
        order = [(verl_fn, verl_times), (rft_fn, rft_times)]
        for fn, times in (order if round_ % 2 == 0 else order[::-1]):
            fn()  # warm-up of the block
            times += [_elapsed(fn) for _ in range(repeats)]
    return statistics.median(verl_times), statistics.median(rft_times)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--batch", type=int, default=2048)
    parser.add_argument("--length", type=int, default=1024)
    parser.add_argument("--group-size", type=int, default=8)
    parser.add_argument("--repeats", type=int, default=11)
    args = parser.parse_args()
    B, T = args.batch, args.length

    gen = torch.Generator().manual_seed(0)
    lengths = torch.randint(1, T + 1, (B,), generator=gen)
    mask = (torch.arange(T) < lengths[:, None]).float()  # (B, T)
    rewards = torch.zeros(B, T)
    rewards[torch.arange(B), lengths - 1] = (torch.rand(B, generator=gen) < 0.5).float()
    uids = np.array([f"uid-{i // args.group_size}" for i in range(B)], dtype=object)
    task_ids = torch.arange(B) // args.group_size  # (B,) what rft's trainer passes
    old_logps = -torch.rand(B, T, generator=gen) * 3  # (B, T)
    logps = old_logps + torch.randn(B, T, generator=gen) * 0.1
    ref_logps = old_logps + torch.randn(B, T, generator=gen) * 0.1
    advantages = torch.randn(B, T, generator=gen) * mask
    config = OmegaConf.create({"clip_ratio": 0.2, "clip_ratio_low": 0.2, "clip_ratio_high": 0.28,
                               "clip_ratio_c": 3.0, "global_batch_info": {}})

    def with_grad() -> torch.Tensor:
        return logps.clone().requires_grad_()

    def verl_ppo() -> None:
        x = with_grad()
        loss, _ = core_algos.compute_policy_loss_vanilla(
            old_log_prob=old_logps, log_prob=x, advantages=advantages, response_mask=mask,
            loss_agg_mode="token-mean", config=config)
        loss.backward()

    def rft_ppo() -> None:
        x = with_grad()
        pg_loss, _ = ppo_policy_loss(
            PolicyLossInputs(x, old_logps, advantages, mask, AggContext()),
            PPOArgs(clip_range=0.2, clip_range_low=0.2, clip_range_high=0.28))
        agg_loss(pg_loss, mask, "token-mean").backward()

    def verl_kl() -> None:
        x = with_grad()
        agg_loss(core_algos.kl_penalty(x, ref_logps, "low_var_kl"), mask).backward()

    def rft_kl() -> None:
        x = with_grad()
        agg_loss(k3(KLInputs(x, ref_logps), KLArgs()), mask).backward()

    cases = [
        ("GRPO advantage (uid strs)", lambda: core_algos.compute_grpo_outcome_advantage(
            rewards, mask, uids),
         lambda: grpo_advantages(AdvantageInputs(rewards, mask, uids), GRPOArgs())),
        ("GRPO advantage (id tensor)", lambda: core_algos.compute_grpo_outcome_advantage(
            rewards, mask, uids),
         lambda: grpo_advantages(AdvantageInputs(rewards, mask, task_ids), GRPOArgs())),
        ("PPO policy loss (fwd+bwd)", verl_ppo, rft_ppo),
        ("low_var_kl (fwd+bwd)", verl_kl, rft_kl),
    ]
    print(f"B={B} T={T} group={args.group_size} torch threads={torch.get_num_threads()} "
          f"median of 3 blocks x {args.repeats} calls each")
    print(f"{'':28s}{'veRL ms':>10s}{'rft ms':>10s}{'veRL/rft':>10s}")
    for name, verl_fn, rft_fn in cases:
        t_verl, t_rft = median_times(verl_fn, rft_fn, args.repeats)
        print(f"{name:28s}{t_verl * 1e3:10.2f}{t_rft * 1e3:10.2f}{t_verl / t_rft:9.2f}x")


if __name__ == "__main__":
    main()
