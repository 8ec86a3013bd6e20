"""Hook specifications of exploration: tasks, workflows, rewards, engines (gathered,
with the others, in :mod:`rft.hookspecs`)."""

from __future__ import annotations

from collections.abc import Callable
from typing import TYPE_CHECKING, Any

from rft.hooks.markers import hookspec

if TYPE_CHECKING:  # what the hooks' dicts hold (rft.plugin_kinds names the same types)
    from rft.buffer.operators import ExperienceOperator
    from rft.buffer.selector import TaskSelector
    from rft.data.task_operator import TaskOperator
    from rft.engines.engine import InferenceEngine
    from rft.engines.reply_parsing import FunctionCall
    from rft.environment import ActionParser, Environment
    from rft.services import RunService
    from rft.workflow import Workflow

# --------------------------------------------------------------------------------------
# Exploration: tasks, workflows, rewards, engines
# --------------------------------------------------------------------------------------


@hookspec
def register_workflows() -> dict[str, type[Workflow]]:
    """Register workflows, selected by ``default_workflow_type`` (explorer input or taskset).

    :return: ``{name: class}``; the class is built per task with the task and a model
        wrapper, and its ``run()`` returns a list of experiences. Its ``Args`` dataclass is
        filled from the taskset's ``workflow_args``. The explorer numbers each
        experience's ``eid.batch`` / ``eid.task`` / ``eid.run`` and keeps what the workflow
        set in ``eid.step`` (the step of a multi-step episode) and ``eid.suffix``; a
        distillation workflow stores a teacher's log-probs in ``teacher_logprobs`` ``(R,)``
        (the trainer's ``teacher_log_prob``). A task's tools (``format.tools_key``,
        ``Task.tools``) are offered in the prompts of ``self.model.chat`` calls that pass
        no ``tools=`` of their own. A class with ``default_reward_fn = "<name>"`` scores
        with that registered reward function when its taskset names none (validation
        selects it and says so; ``math_workflow``: ``math_reward``).

    Example::

        @hookimpl
        def register_workflows():
            return {"math_workflow": MathWorkflow}
    """


@hookspec
def register_environments() -> dict[str, type[Environment]]:
    """Register text environments (:class:`rft.environment.Environment`), selected by a
    taskset's ``environment`` and played by ``environment_workflow``.

    :return: ``{name: class}``; the class is built with an instance of its ``Args``
        dataclass filled from the taskset's ``environment_args``; ``reset(task, seed)``
        starts an episode and returns ``(observation, info)``, ``step(action)`` returns a
        :class:`rft.environment.StepResult`, ``close()`` releases it (idempotent).

    Example::

        @hookimpl
        def register_environments():
            return {"textworld": TextWorldEnvironment}
    """


@hookspec
def register_action_parsers() -> dict[str, ActionParser]:
    """Register action parsers: what turns a model's reply into the action an environment
    steps with, selected by ``environment_workflow``'s ``workflow_args.action_parser``
    (default: the environment's ``default_action_parser``).

    :return: ``{name: callable}``; the callable takes the reply's text and returns the
        action (a string), or ``None`` when the reply holds no valid action (the
        environment is then not stepped and the agent is told so). Built in: ``raw``,
        ``last_code_block``, ``action_tag``, ``last_line``.

    Example::

        @hookimpl
        def register_action_parsers():
            return {"json_action": lambda reply: json.loads(reply).get("action")}
    """


@hookspec
def register_reward_fns() -> dict[str, Callable[..., Any]]:
    """Register reward functions, selected by ``default_reward_fn_type``.

    :return: ``{name: callable or class}``; it scores a response against a task and
        returns a dict of named float rewards whose sum is the reward. Its ``Args``
        dataclass is filled from the taskset's ``reward_fn_args``.

    Example::

        @hookimpl
        def register_reward_fns():
            return {"gsm8k_reward": gsm8k_reward}
    """


@hookspec
def register_task_selectors() -> dict[str, type[TaskSelector]]:
    """Register task selectors, selected by a taskset's ``task_selector.selector_type``.

    :return: ``{name: class}``; the class decides which task indices of a taskset form
        the next batch (sequential, shuffled, by difficulty, …).

    Example::

        @hookimpl
        def register_task_selectors():
            return {"shuffle": ShuffleSelector}
    """


@hookspec
def register_experience_operators() -> dict[str, type[ExperienceOperator]]:
    """Register experience operators, selected by
    ``data_processor.experience_pipeline.operators[i].name``.

    :return: ``{name: class}``; the class transforms a list of experiences between the
        explorer and the buffer (filter, reward shaping, explorer-side advantage). Its
        ``Args`` dataclass is filled from the operator's ``args``; its ``needs_services``
        (e.g. ``("data_juicer",)``) names the ``service`` sections it works through, which
        validation then requires.

    Example::

        @hookimpl
        def register_experience_operators():
            return {"reward_filter": RewardFilter}
    """


@hookspec
def register_task_operators() -> dict[str, type[TaskOperator]]:
    """Register task operators, selected by
    ``data_processor.task_pipeline.operators[i].name``.

    :return: ``{name: class}``; the class (a :class:`rft.data.task_operator.TaskOperator`)
        filters, changes or scores the taskset's rows before exploring
        (``process(rows) -> rows``). Its ``Args`` dataclass is filled from the operator's
        ``args``; its ``version`` is part of the pipeline's cache key; ``row_wise = False``
        keeps all rows in one call (no split over ``num_process`` workers).

    Example::

        class LengthFilter(TaskOperator):
            Args = LengthArgs

            def process(self, rows):
                return [r for r in rows if len(r[self.args.key]) <= self.args.max_len]

        @hookimpl
        def register_task_operators():
            return {"length_filter": LengthFilter}
    """


@hookspec
def register_services() -> dict[str, type[RunService]]:
    """Register run services, selected by the section set in ``service``: the service
    registered as ``data_juicer`` runs when ``service.data_juicer`` is set.

    :return: ``{section name: class}``; the class (a :class:`rft.services.RunService`) is
        built with the section's dataclass and the job dir; the launcher calls ``start()``
        (returns environment variables the run reaches the service through) before a
        stage runs and ``close()`` after it, however it ends.

    Example::

        class DataJuicerService(RunService):
            def start(self):
                ...  # start the server, wait until it answers
                return {"RFT_DATA_JUICER_URL": self.url}

            def close(self):
                ...  # stop it and its process group

        @hookimpl
        def register_services():
            return {"data_juicer": DataJuicerService}
    """


@hookspec
def register_engines() -> dict[str, type[InferenceEngine]]:
    """Register inference engines, selected by ``explorer.rollout_model.engine_type``.

    :return: ``{name: class}``; the class generates responses (with per-token
        log-probabilities) and accepts weight updates (``update_weights``). An engine whose
        model lives in processes of its own may also implement
        :class:`rft.distributed.weight_broadcast.JoinsWeightGroup`, so that with
        ``sync_method: nccl`` those processes receive the trainer's broadcast themselves.
        One that can release its device memory while a colocated trainer steps implements
        :class:`rft.engines.engine_sleep.SleepMode` (``sleep_mode``, ``sleep``,
        ``wake_up``; vLLM's sleep mode). A class with ``remote = True`` serves a model on
        a server elsewhere (the built-in ``external``): chat only, no weights, never the
        policy being trained (validation reads the flag). A class with an ``Args``
        dataclass gets ``extra_engine_args`` checked against it at validation and, unless it
        has a ``from_config(config)`` classmethod building it, the fields of ``Args`` as
        keyword arguments of its constructor. One with
        ``serves_lora = True`` implements ``update_adapter(adapter, version)`` and serves
        ``model.lora_configs`` adapters (:class:`rft.adapter.AdapterWeights`); validation
        refuses LoRA with any other. ``required_modules`` (with ``install_hint``) name the
        Python packages it imports when it starts: validation refuses the engine where one
        is missing. ``engine_options`` name the vLLM-style ``InferenceModelConfig`` fields
        it reads; one set for an engine that does not read it is a warning.

    Example::

        @hookimpl
        def register_engines():
            return {"hf": HFEngine}
    """


@hookspec
def register_tool_call_parsers() -> dict[str, Callable[[str], tuple[str, list[FunctionCall]]]]:
    """Register tool-call parsers of the OpenAI endpoint, selected by
    ``explorer.rollout_model.tool_call_parser`` (and an auxiliary model's).

    :return: ``{name: callable}``; the callable takes a reply's text and returns
        ``(content, calls)``: the text left as the message's ``content`` and a list of
        :class:`rft.engines.reply_parsing.FunctionCall` (empty when the reply calls no
        tool). The endpoint returns the calls as ``message.tool_calls``.

    Example::

        @hookimpl
        def register_tool_call_parsers():
            return {"hermes": hermes_tool_calls}
    """


@hookspec
def register_reasoning_parsers() -> dict[str, Callable[[str], tuple[str | None, str]]]:
    """Register reasoning parsers of the OpenAI endpoint, selected by
    ``explorer.rollout_model.reasoning_parser`` (and an auxiliary model's).

    :return: ``{name: callable}``; the callable takes a reply's text and returns
        ``(reasoning, content)``: the reasoning (``None`` when the reply has none),
        returned as ``message.reasoning_content``, and the rest.

    Example::

        @hookimpl
        def register_reasoning_parsers():
            return {"qwen3": qwen3_reasoning}
    """
