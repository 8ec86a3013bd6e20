"""rft-plugin-rewards: reward functions selected by ``default_reward_fn_type``.

Every reward function has the signature ``fn(response, truth, args) -> dict[str, float]``:
``response`` is the generated text, ``truth`` the taskset's response field (a string, or
a mapping for countdown), ``args`` an instance of the function's ``Args`` dataclass (from
``reward_fn_args``). The returned parts are summed into the experience's reward and each
is logged as a metric.

A reward that needs more than the text declares ``fn.extra_inputs``: the names of
keyword arguments it takes (all optional). The single-turn workflows of
rft-plugin-workflows pass those they know: ``response_tokens`` (the response's token ids;
``math_dapo_reward``'s overlong penalty), ``with_think`` and ``format_score_coef``
(``math_boxed_workflow``'s arguments; ``math_boxed_reward``).
"""

from __future__ import annotations

from typing import Any

from rft import hookimpl
from rft_plugin_rewards.countdown import countdown_reward
from rft_plugin_rewards.dapo import math_dapo_reward
from rft_plugin_rewards.gsm8k import gsm8k_reward
from rft_plugin_rewards.math import accuracy_reward, format_reward, math_boxed_reward, math_reward


@hookimpl
def register_reward_fns() -> dict[str, Any]:
    return {
        "accuracy_reward": accuracy_reward,
        "format_reward": format_reward,
        "math_reward": math_reward,
        "math_boxed_reward": math_boxed_reward,
        "gsm8k_reward": gsm8k_reward,
        "countdown_reward": countdown_reward,
        "math_dapo_reward": math_dapo_reward,
    }
