"""The typed plugin kinds (:mod:`rft.plugin_kinds`): one per ``register_*`` hook, typed as
that hook's dicts, and registry lookups by kind object."""

from __future__ import annotations

import inspect

import pytest

from rft import hookspecs, plugin_kinds
from rft.plugin_kinds import ALL_KINDS, POLICY_LOSS_FN, TRAINER, PluginKind
from rft.plugins import KINDS, PluginRegistry


def test_each_register_hook_has_one_kind_typed_as_what_the_hook_returns() -> None:
    """``PluginKind[T]`` of a kind and its hook's ``dict[str, T]`` name the same ``T``
    (annotations are compared as written: the contracts are imported for the checker only)."""
    hooks = {name for name, fn in inspect.getmembers(hookspecs, inspect.isfunction)
             if name.startswith("register_")}
    assert {kind.hook for kind in ALL_KINDS} == hooks
    assert list(KINDS) == [kind.name for kind in ALL_KINDS]
    declared = {name: text for name, text in plugin_kinds.__annotations__.items()
                if text.startswith("PluginKind[")}
    for kind in ALL_KINDS:
        constant = next(name for name in declared if getattr(plugin_kinds, name) is kind)
        contract = declared[constant].removeprefix("PluginKind[").removesuffix("]")
        returned = getattr(hookspecs, kind.hook).__annotations__["return"]
        assert returned == f"dict[str, {contract}]", kind.name


def test_a_kind_object_looks_up_what_its_name_does() -> None:
    registry = PluginRegistry.create(kinds=(POLICY_LOSS_FN, "trainer"), autoload=False)
    assert registry.get(POLICY_LOSS_FN, "ppo") is registry.get("policy_loss_fn", "ppo")
    assert registry.names(TRAINER) == registry.names("trainer")
    assert registry.has(TRAINER, "torch")


def test_a_kind_that_is_not_the_registered_one_is_refused() -> None:
    """A look-alike kind (same name, another hook) is not a kind of this registry."""
    registry = PluginRegistry.create(kinds=(POLICY_LOSS_FN,), autoload=False)
    look_alike: PluginKind[object] = PluginKind("policy_loss_fn", "register_other", "other")
    with pytest.raises(KeyError, match="unknown plugin kind 'policy_loss_fn'"):
        registry.names(look_alike)
    with pytest.raises(KeyError, match="was not collected"):
        registry.names(TRAINER)
