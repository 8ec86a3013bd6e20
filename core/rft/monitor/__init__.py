"""Metric monitors: the interface (:mod:`rft.monitor.base`) and the core's own monitors."""
