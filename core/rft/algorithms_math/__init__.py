"""Deprecated location of the advantage estimators; see :mod:`rft.algorithms_math.advantages`."""
