"""The data processor's task side: task operators and the task pipeline.

:mod:`rft.data.task_operator` is the operator contract (``register_task_operators``);
:mod:`rft.data.task_pipeline` runs ``data_processor.task_pipeline`` before exploring and
writes the processed taskset the explorer reads.
"""
