"""The address ``ray start`` recorded in Ray's address file: the one cluster of this
machine that ``cluster.ray_address: auto`` joins (read by validation and by the join).
Ray is imported, never started."""

from __future__ import annotations


def recorded_ray_address() -> tuple[str, str] | None:
    """``(file, address)`` from Ray's address file (the last ``ray start``), if any."""
    from ray._common.utils import get_ray_address_file

    path = get_ray_address_file(None)
    try:
        with open(path, encoding="utf-8") as handle:
            recorded = handle.read().strip()
    except OSError:
        return None
    return (path, recorded) if recorded else None


__all__ = ["recorded_ray_address"]
