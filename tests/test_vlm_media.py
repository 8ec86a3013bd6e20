"""Images of taskset rows (``format.image_key``): the reference forms that load, and one
line naming the row and the key for each bad image (missing, corrupt, refused mode, too
large) or a video without a decoder."""

from __future__ import annotations

import io
import json
from pathlib import Path

import pytest
from PIL import Image

from rft.buffer.taskset import TaskPlugins, TasksetError, load_tasks
from rft.config.schema import FormatConfig, TasksetConfig
from rft.multimodal.media import MAX_IMAGE_PIXELS, MediaError, load_image, video_decoder

PLUGINS = TaskPlugins(workflow=None, workflow_args=None, reward_fn=None, reward_args=None)


def taskset(path: Path, **format_fields: str) -> TasksetConfig:
    return TasksetConfig(name="shapes", path=str(path), format=FormatConfig(
        prompt_key="q", response_key="a", image_key="img", **format_fields))


def write_rows(path: Path, rows: list[dict]) -> Path:
    path.write_text("".join(json.dumps(r) + "\n" for r in rows), encoding="utf-8")
    return path


def png(image: Image.Image, path: Path) -> Path:
    image.save(path, format="PNG")
    return path


def test_paths_urls_and_lists_load_as_rgb(tmp_path: Path) -> None:
    (tmp_path / "img").mkdir()
    png(Image.new("RGB", (8, 6), (255, 0, 0)), tmp_path / "img" / "red.png")
    png(Image.new("RGBA", (4, 4), (0, 0, 255, 0)), tmp_path / "clear.png")  # alpha 0
    png(Image.new("L", (5, 5), 128), tmp_path / "grey.png")
    rows = [{"q": "a", "a": "red", "img": "img/red.png"},
            {"q": "b", "a": "two", "img": [f"file://{tmp_path}/clear.png", "grey.png"]}]
    tasks = load_tasks(taskset(write_rows(tmp_path / "t.jsonl", rows)), PLUGINS, is_eval=False)
    assert [len(t.images) for t in tasks] == [1, 2]
    assert {im.mode for t in tasks for im in t.images} == {"RGB"}
    assert tasks[0].images[0].getpixel((0, 0)) == (255, 0, 0)
    assert tasks[1].images[0].getpixel((0, 0)) == (255, 255, 255)  # over white
    assert tasks[1].images[1].getpixel((0, 0)) == (128, 128, 128)


def test_bytes_and_datasets_image_dicts_load() -> None:
    buffer = io.BytesIO()
    Image.new("P", (3, 3), 0).save(buffer, format="PNG")
    data = buffer.getvalue()
    assert load_image(data).size == (3, 3)
    assert load_image({"bytes": data, "path": None}).mode == "RGB"


@pytest.mark.parametrize(("make", "message"), [
    (lambda d: "nowhere.png", "'nowhere.png': no such file"),
    (lambda d: (d / "bad.png").write_bytes(b"\x89PNG not really") and "bad.png",
     "'bad.png': not an image Pillow can read"),
    (lambda d: Image.new("CMYK", (4, 4)).save(d / "cmyk.jpg") or "cmyk.jpg",
     "'cmyk.jpg': image mode 'CMYK' is not converted to RGB"),
    (lambda d: png(Image.new("1", (4097, 4097)), d / "huge.png").name,
     f"'huge.png': 4097×4097 = 16785409 pixels is over the cap of {MAX_IMAGE_PIXELS}"),
    (lambda d: "https://example.com/x.png", "only local files and file:// URLs are read"),
])
def test_a_bad_image_is_one_line_naming_the_row_and_key(tmp_path: Path, make, message) -> None:
    reference = make(tmp_path)
    path = write_rows(tmp_path / "t.jsonl", [{"q": "ok", "a": "x", "img": []},
                                             {"q": "bad", "a": "x", "img": reference}])
    with pytest.raises(TasksetError) as caught:
        load_tasks(taskset(path), PLUGINS, is_eval=False)
    text = str(caught.value)
    assert "\n" not in text
    assert text.startswith(f"taskset 'shapes' ({path}): line 2: 'img' (format.image_key): ")
    assert message in text


def test_a_truncated_image_is_refused_when_decoded(tmp_path: Path) -> None:
    data = (png(Image.effect_noise((64, 64), 50).convert("RGB"), tmp_path / "n.png")
            .read_bytes())
    with pytest.raises(MediaError, match="corrupt image data"):
        load_image(data[: len(data) // 2])


def test_a_row_without_the_image_column_names_the_key(tmp_path: Path) -> None:
    path = write_rows(tmp_path / "t.jsonl", [{"q": "no image", "a": "x"}])
    with pytest.raises(TasksetError, match=r"line 1 has no key 'img' \(format.image_key\)"):
        load_tasks(taskset(path), PLUGINS, is_eval=False)


@pytest.mark.skipif(video_decoder() is not None, reason="a video decoder is installed here")
def test_a_video_without_a_decoder_is_refused_naming_the_row(tmp_path: Path) -> None:
    (tmp_path / "clip.mp4").write_bytes(b"\x00")
    path = write_rows(tmp_path / "t.jsonl", [{"q": "v", "a": "x", "vid": "clip.mp4"}])
    config = TasksetConfig(name="clips", path=str(path), format=FormatConfig(
        prompt_key="q", response_key="a", video_key="vid"))
    with pytest.raises(TasksetError) as caught:
        load_tasks(config, PLUGINS, is_eval=False)
    assert str(caught.value) == (f"taskset 'clips' ({path}): line 1: 'vid' (format.video_key): "
                                 "'clip.mp4': no video decoder is installed (pip install av)")
