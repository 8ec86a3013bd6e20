"""``rft studio``: the command's arguments and its run."""

from __future__ import annotations

import argparse
from pathlib import Path

from rft_plugin_studio.page import StudioContext


def add_arguments(parser: argparse.ArgumentParser) -> None:
    """``rft studio [--runs-root DIR] [--host H] [--port P] [--key-env VAR]``."""
    parser.add_argument("--runs-root", type=Path, default=Path("checkpoints"),
                        help="the checkpoint root whose runs are shown (default: checkpoints)")
    parser.add_argument("--host", default="127.0.0.1",
                        help="address to serve on (default 127.0.0.1; beyond loopback "
                             "needs --key-env)")
    parser.add_argument("--port", type=int, default=8765, help="port (default 8765)")
    parser.add_argument("--key-env", default=None, metavar="VAR",
                        help="environment variable holding the access key")


def run(args: argparse.Namespace) -> int:
    """Serve the studio until interrupted; exit status 0."""
    from rft_plugin_studio.server import access_key, serve  # uvicorn: only when serving

    serve(StudioContext(runs_root=args.runs_root, access_key=access_key(args.key_env)),
          args.host, args.port)
    return 0
