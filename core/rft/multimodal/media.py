"""Images and videos of a dataset row (``format.image_key`` / ``format.video_key``).

A row's column holds one reference or a list of them. A reference is

- a path, relative to the folder of the data file (or absolute, ``~`` expanded);
- a ``file://`` URL (of a local file; other URLs are refused: rft reads no network);
- the file's bytes (``bytes``, or a ``{"bytes": …, "path": …}`` dict, the form the
  ``datasets`` library stores its ``Image`` feature in; ``path`` is used without bytes);
- an already decoded ``PIL.Image.Image``.

Images are decoded with Pillow and returned in RGB. Modes: ``RGB`` as is; the grey and
palette modes ``1``, ``L``, ``P`` and the alpha modes ``LA``, ``PA``, ``RGBA`` are
converted (alpha composited over white); any other mode (``CMYK``,
``YCbCr``, ``LAB``, ``HSV``, 16-bit / float ``I`` / ``F``) is refused: converting them
means guessing a colour space or a range. Images larger than :data:`MAX_IMAGE_PIXELS`
(width × height, read from the header before decoding) are refused; the processor
resizes the rest into its own pixel range.

Videos need a decoder: PyAV (``av``) when installed; without it a video column is
refused in one line. Every problem is a :class:`MediaError` whose message names the
reference; the taskset puts the row and the key before it.
"""

from __future__ import annotations

import importlib
import importlib.util
import io
import os
from collections.abc import Sequence
from typing import Any

from rft.errors import RftError

MAX_IMAGE_PIXELS = 4096 * 4096
"""Largest image accepted, in pixels (16.8 Mpx): larger ones are refused, not resized
(a decompression bomb or a mistake; a VLM processor would shrink it to well under 1 Mpx)."""

CONVERTED_MODES = frozenset({"1", "L", "LA", "P", "PA", "RGBA", "RGBa", "La"})
"""Pillow modes converted to RGB (alpha composited over white); ``RGB`` is kept."""


class MediaError(RftError):
    """An image / video reference of a row cannot be used (one line, naming it)."""


def _describe(ref: Any) -> str:
    if isinstance(ref, (bytes, bytearray)):
        return f"<{len(ref)} bytes>"
    if isinstance(ref, dict):
        return f"<dict with keys {sorted(ref)}>"
    return repr(ref) if isinstance(ref, str) else f"<{type(ref).__name__}>"


def references(value: Any) -> list[Any]:
    """The references in a column value: a list / tuple as its items, else one item."""
    if isinstance(value, (list, tuple)):
        return list(value)
    return [value]


def resolve_path(ref: str, base_dir: str | None) -> str:
    """A local path from a path or ``file://`` URL, relative to ``base_dir``.

    :raises MediaError: a URL of another scheme.
    """
    if "://" in ref:
        scheme, _, rest = ref.partition("://")
        if scheme.lower() != "file":
            raise MediaError(f"{ref!r}: only local files and file:// URLs are read "
                             f"(no {scheme}:// downloads)")
        ref = rest
    path = os.path.expanduser(ref)
    if not os.path.isabs(path) and base_dir:
        path = os.path.join(base_dir, path)
    return path


def _open(ref: Any, base_dir: str | None) -> Any:
    """A lazily loaded ``PIL.Image.Image`` (the header read) for ``ref``."""
    from PIL import Image, UnidentifiedImageError

    if isinstance(ref, Image.Image):
        return ref
    if isinstance(ref, dict):
        data = ref.get("bytes")
        ref = data if data is not None else ref.get("path")
    try:
        if isinstance(ref, (bytes, bytearray)):
            return Image.open(io.BytesIO(bytes(ref)))
        if isinstance(ref, str) and ref:
            path = resolve_path(ref, base_dir)
            if not os.path.isfile(path):
                raise MediaError(f"{_describe(ref)}: no such file ({path})")
            return Image.open(path)
    except UnidentifiedImageError as exc:
        raise MediaError(f"{_describe(ref)}: not an image Pillow can read (corrupt or "
                         f"unknown format)") from exc
    except OSError as exc:
        raise MediaError(f"{_describe(ref)}: cannot be read: {exc}") from exc
    raise MediaError(f"{_describe(ref)}: not an image reference (a path, a file:// URL, "
                     f"bytes or a {{'bytes', 'path'}} dict)")


def to_rgb(image: Any) -> Any:
    """``image`` in RGB (module docstring: converted and refused modes)."""
    from PIL import Image

    if image.mode == "RGB":
        return image
    if image.mode not in CONVERTED_MODES:
        raise MediaError(f"image mode {image.mode!r} is not converted to RGB (accepted: RGB "
                         f"and {', '.join(sorted(CONVERTED_MODES))})")
    if "A" in image.mode or "a" in image.mode or (image.mode == "P"
                                                   and "transparency" in image.info):
        rgba = image.convert("RGBA")
        background = Image.new("RGBA", rgba.size, (255, 255, 255, 255))
        return Image.alpha_composite(background, rgba).convert("RGB")
    return image.convert("RGB")


def load_image(ref: Any, base_dir: str | None = None, *,
               max_pixels: int = MAX_IMAGE_PIXELS) -> Any:
    """The RGB ``PIL.Image.Image`` of one reference (module docstring).

    :raises MediaError: missing file, unreadable / corrupt data, a refused mode, more than
        ``max_pixels`` pixels.
    """
    image = _open(ref, base_dir)
    width, height = image.size
    if width * height > max_pixels:
        raise MediaError(f"{_describe(ref)}: {width}×{height} = {width * height} pixels is over "
                         f"the cap of {max_pixels} (rft.multimodal.media.MAX_IMAGE_PIXELS)")
    try:
        image.load()
    except (OSError, SyntaxError) as exc:  # truncated / corrupt data behind a valid header
        raise MediaError(f"{_describe(ref)}: corrupt image data ({exc})") from exc
    try:
        return to_rgb(image)
    except MediaError as exc:
        raise MediaError(f"{_describe(ref)}: {exc}") from exc


def load_images(value: Any, base_dir: str | None = None) -> tuple[Any, ...]:
    """The RGB images of a column value (one reference or a list of them)."""
    return tuple(load_image(ref, base_dir) for ref in references(value))


def video_decoder() -> str | None:
    """The name of the installed video decoder rft uses (``"av"``), or ``None``."""
    return "av" if importlib.util.find_spec("av") is not None else None


def load_video(ref: Any, base_dir: str | None = None, *, max_frames: int = 32
               ) -> list[Any]:
    """Up to ``max_frames`` RGB frames (``PIL.Image.Image``) of one video, evenly spaced.

    :raises MediaError: no decoder installed, a missing or unreadable file.
    """
    if video_decoder() is None:
        raise MediaError(f"{_describe(ref)}: no video decoder is installed (pip install av)")
    av = importlib.import_module("av")

    if not isinstance(ref, str):
        raise MediaError(f"{_describe(ref)}: a video reference must be a path or file:// URL")
    path = resolve_path(ref, base_dir)
    if not os.path.isfile(path):
        raise MediaError(f"{ref!r}: no such file ({path})")
    try:
        with av.open(path) as container:
            frames = [frame.to_image() for frame in container.decode(video=0)]
    except Exception as exc:  # PyAV raises its own error tree (av.error.*)
        raise MediaError(f"{ref!r}: cannot be decoded: {str(exc).splitlines()[0]}") from exc
    if not frames:
        raise MediaError(f"{ref!r}: no video frames")
    step = max(1, len(frames) // max_frames)
    return [to_rgb(f) for f in frames[::step][:max_frames]]


def load_videos(value: Any, base_dir: str | None = None) -> tuple[list[Any], ...]:
    """The frames of each video of a column value."""
    return tuple(load_video(ref, base_dir) for ref in references(value))


__all__: Sequence[str] = ["MAX_IMAGE_PIXELS", "MediaError", "load_image", "load_images",
                          "load_video", "load_videos", "references", "resolve_path", "to_rgb",
                          "video_decoder"]
