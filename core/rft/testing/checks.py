"""Contract checks for the functions a plugin registers: call the function the way rft
does, and assert the properties every implementation of its kind must have.

    from rft.testing.checks import check_policy_loss

    check_policy_loss(my_loss, MyLossArgs(), inputs)   # inputs: PolicyLossInputs

Each check raises :class:`AssertionError` with one line naming the check, the function
and the violated property, e.g. ``check_policy_loss(my_loss): gradient w.r.t. log_prob
is non-zero at masked positions (max |grad| 0.25)``. Use them with the strategies of
:mod:`rft.testing.strategies` under ``hypothesis.given``, which then shrinks a failure to
a small example. Where a property does not hold for a function by design, the check has
a parameter to leave it out.

Tolerances depend on the dtype: a comparison of ``a`` and ``b`` allows
``tol · (1 + magnitude)``, ``tol`` = 1e-9 for float64, 1e-4 for float32.

This module is the kit's entry point; each check lives in a module of its own:
:mod:`~rft.testing.check_policy_loss`, :mod:`~rft.testing.check_advantage`,
:mod:`~rft.testing.check_kl_entropy`, :mod:`~rft.testing.check_rewards` (rewards and
workflows), :mod:`~rft.testing.check_environment` (environments) and
:mod:`~rft.testing.check_verl`, built from :mod:`~rft.testing.check_base`.
"""

from rft.testing.check_advantage import INVARIANCE_TOL, check_advantage
from rft.testing.check_environment import check_environment
from rft.testing.check_kl_entropy import check_entropy, check_kl
from rft.testing.check_policy_loss import check_policy_loss
from rft.testing.check_rewards import check_reward, check_workflow
from rft.testing.check_verl import assert_equals_verl

__all__ = ["INVARIANCE_TOL", "assert_equals_verl", "check_advantage", "check_entropy",
           "check_environment", "check_kl", "check_policy_loss", "check_reward",
           "check_workflow"]
