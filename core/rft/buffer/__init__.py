"""Buffers: tasksets the explorer reads, experience storages between explorer and trainer."""
