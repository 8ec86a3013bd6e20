"""The ``wandb`` monitor: one Weights & Biases run per role.

Project = the config's ``project``; run name = ``<name>_<role>``; both runs of an
experiment share the group ``<name>`` (``job_type`` = role). Needs ``pip install
'rft-framework[wandb]'`` (wandb ≥ 0.19, for several runs in one process).
"""

from __future__ import annotations

import netrc
import os
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any, Literal, cast
from urllib.parse import urlparse

from rft.errors import RftError
from rft.folders import make_folder
from rft.monitor.base import Monitor

DEFAULT_BASE_URL = "https://api.wandb.ai"


@dataclass
class WandbArgs:
    """Arguments of the ``wandb`` monitor."""

    base_url: str | None = None
    """W&B server; overrides ``WANDB_BASE_URL``; ``None``: that variable, else
    ``https://api.wandb.ai``."""
    api_key: str | None = None
    """API key; overrides ``WANDB_API_KEY``; ``None``: that variable, else the key that
    ``wandb login`` stored in ``~/.netrc``."""
    mode: Literal["online", "offline", "disabled"] | None = None
    """``None``: ``WANDB_MODE`` if set, else ``online`` when an API key is available and
    ``offline`` when none is (upload later with ``wandb sync <dir>``)."""
    entity: str | None = None
    """W&B entity (user or team); ``None``: the key's default entity."""
    group: str | None = None
    """Run group; ``None``: the experiment ``name`` (groups its explorer and trainer runs)."""
    tags: list[str] = field(default_factory=list)
    """Tags of both runs."""
    dir: str | None = None
    """Where wandb writes its local files (a ``wandb/`` folder inside); ``None``:
    ``WANDB_DIR`` if set, else ``<checkpoint_job_dir>/monitor``."""


def _has_netrc_key(base_url: str) -> bool:
    host = urlparse(base_url).hostname
    try:
        return bool(host and netrc.netrc().authenticators(host))
    except (OSError, netrc.NetrcParseError):
        return False


WandbMode = Literal["online", "offline", "disabled", "shared"]
"""The modes ``wandb.init`` takes."""


def resolve_mode(args: WandbArgs) -> tuple[str, str | None, str]:
    """``(mode, api_key, base_url)`` after applying the arguments, then the environment."""
    base_url = args.base_url or os.environ.get("WANDB_BASE_URL") or DEFAULT_BASE_URL
    api_key = args.api_key or os.environ.get("WANDB_API_KEY") or None
    mode: str | None = args.mode or os.environ.get("WANDB_MODE") or None
    if mode is not None:
        mode = {"dryrun": "offline", "run": "online"}.get(mode, mode)  # wandb's legacy names
    if mode is None:
        mode = "online" if api_key or _has_netrc_key(base_url) else "offline"
    return mode, api_key, base_url


class WandbMonitor(Monitor):
    """Logs each step with ``run.log(metrics, step=step)``; metric names are kept as given,
    so ``actor/pg_loss`` lands in the ``actor`` panel section.

    Values are passed through unchanged: wandb records NaN and inf (shown as gaps), and
    strings as text. W&B drops a step lower than one already logged in the same run (a
    warning), which is what a resumed run that re-logs old steps gets; a resumed run is a
    new W&B run. ``close()`` finishes the run.
    """

    Args = WandbArgs

    def __init__(self, project: str, name: str, role: str, log_dir: str,
                 args: WandbArgs | None = None) -> None:
        super().__init__(project, name, role, log_dir, args or WandbArgs())
        try:
            import wandb
        except ImportError:
            raise RftError("monitor.monitor_type: 'wandb' needs the wandb package: "
                           "pip install 'rft-framework[wandb]'") from None
        self.mode, api_key, base_url = resolve_mode(self.args)
        self.dir = self.args.dir or os.environ.get("WANDB_DIR") or log_dir
        make_folder(self.dir, "monitor wandb")
        try:
            settings = wandb.Settings(base_url=base_url, api_key=api_key)
        except Exception as exc:  # pydantic validation of base_url / api_key
            raise RftError(f"monitor.monitor_args: invalid wandb settings: "
                           f"{_one_line(exc)}") from exc
        try:
            self._run = wandb.init(
                project=project, name=self.run_name, group=self.args.group or name,
                job_type=role, entity=self.args.entity, tags=list(self.args.tags) or None,
                # WANDB_MODE may hold any string: wandb.init refuses a wrong one itself
                mode=cast(WandbMode, self.mode), dir=self.dir, reinit="create_new",
                settings=settings)
        except Exception as exc:
            raise RftError(f"monitor: wandb.init of run {self.run_name!r} ({self.mode}, "
                           f"{base_url}) failed: {_one_line(exc)}") from exc
        self._closed = False

    def start(self, total_steps: int) -> None:
        self._run.config.update({"total_steps": total_steps, "role": self.role},
                                allow_val_change=True)

    def log(self, metrics: Mapping[str, float], step: int) -> None:
        self._run.log(dict(metrics), step=step)

    def log_table(self, name: str, rows: Sequence[Mapping[str, Any]], step: int) -> None:
        """A ``wandb.Table`` under ``name`` at ``step``."""
        import wandb

        if rows:
            columns = list(rows[0])
            self._run.log({name: wandb.Table(columns=[*columns], data=[
                [row.get(c) for c in columns] for row in rows])}, step=step)

    def close(self) -> None:
        if not self._closed:
            self._closed = True
            self._run.finish()


def _one_line(exc: BaseException) -> str:
    text = " ".join(str(exc).split())
    return text[:300] or type(exc).__name__
