"""The ``file`` experience storage: append-only JSON lines."""

from __future__ import annotations

import contextlib
import json
import os
from typing import Any

from rft.buffer.experience_codec import experience_from_dict, experience_to_dict
from rft.buffer.storage_base import ExperienceStorage, log_skipped_write
from rft.errors import RftError
from rft.experience import Experience


class FileStorage(ExperienceStorage):
    """Append-only JSON lines; reads go through the file from the start. A keyed write
    (:meth:`~ExperienceStorage.idempotent_writes`) stores its key in its first line
    (``"write_key"``), so a reopened file skips a key it already holds."""

    def __init__(self, name: str, path: str) -> None:
        super().__init__(name)
        try:
            os.makedirs(os.path.dirname(os.path.abspath(path)), exist_ok=True)
            self._file = open(path, "a+", encoding="utf-8")  # noqa: SIM115
        except OSError as exc:
            raise RftError(f"experience buffer {name!r}: cannot open {path!r}: "
                           f"{exc.strerror}") from exc
        self.path = path
        self._file.seek(0)
        self._lines = 0
        self._keys: set[str] = set()
        for line in self._file:
            self._lines += 1
            if '"write_key"' in line:
                with contextlib.suppress(ValueError, KeyError):  # a line cut by a kill
                    self._keys.add(str(json.loads(line)["write_key"]))
        self._offset = 0

    def _append(self, experiences: list[Experience]) -> None:
        self._append_keyed(experiences, None)

    def _append_keyed(self, experiences: list[Experience], key: str | None) -> None:
        if key is not None and key in self._keys:
            log_skipped_write(self.name, key, None, len(experiences))
            return  # written before a crash: the redone step's lines are there
        rows = [experience_to_dict(exp) for exp in experiences]
        if key is not None and rows:
            rows[0]["write_key"] = key
        text = "".join(json.dumps(row) + "\n" for row in rows)
        try:
            self._file.write(text)
            self._file.flush()
            os.fsync(self._file.fileno())
        except OSError as exc:
            raise RftError(f"experience buffer {self.name!r}: cannot write to {self.path}: "
                           f"{exc.strerror or exc}") from exc
        self._lines += len(experiences)
        if key is not None and rows:  # an empty write records no key (as in the file)
            self._keys.add(key)

    def _available(self) -> int:
        return self._lines - self._offset

    def _take(self, count: int) -> list[Experience]:
        self._file.seek(0)
        lines = self._file.readlines()[self._offset:self._offset + count]
        self._file.seek(0, os.SEEK_END)
        self._offset += len(lines)
        return [experience_from_dict(json.loads(line)) for line in lines]

    def state_dict(self) -> dict[str, Any]:
        with self._lock:
            return {**super().state_dict(), "offset": self._offset}

    def load_state_dict(self, state: dict[str, Any]) -> None:
        super().load_state_dict(state)
        with self._lock:
            self._offset = min(int(state.get("offset", self._offset)), self._lines)

    def close(self) -> None:
        self._file.close()
