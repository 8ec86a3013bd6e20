"""Vision-language fixtures: the tiny Qwen2-VL checkpoint (built once per session) and
coloured test images drawn with Pillow."""

from __future__ import annotations

from pathlib import Path

import pytest

from rft.testing.tiny_vision_model import build_tiny_vision_model

_BUILT: dict[int, Path] = {}


@pytest.fixture(scope="session")
def tiny_vision_dir(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """Directory of a tiny random Qwen2-VL model and its processor (seed 0)."""
    key = id(tmp_path_factory)
    if key not in _BUILT:
        _BUILT.clear()
        _BUILT[key] = build_tiny_vision_model(tmp_path_factory.mktemp("tiny_qwen2_vl"), seed=0)
    return _BUILT[key]


def solid_image(colour: tuple[int, int, int], size: tuple[int, int] = (40, 32)) -> object:
    """An RGB image of one colour (``PIL.Image.Image``)."""
    from PIL import Image

    return Image.new("RGB", size, colour)
