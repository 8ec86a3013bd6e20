"""Whether a host a server binds to keeps it on this machine (loopback).

Decided on addresses, never on how a name is spelled: ``127.0.0.1.nip.io`` starts like a
loopback address but is a public DNS name, and ``127.evil.example`` may resolve anywhere.

- an IP literal is loopback when it is in ``127.0.0.0/8`` or is ``::1``;
- ``localhost`` (exactly) is loopback;
- any other name is resolved (``getaddrinfo``) and is loopback only when every address it
  resolves to is; a name that does not resolve here (no DNS, unknown name) is not.
"""

from __future__ import annotations

import ipaddress
import socket
from collections.abc import Callable, Sequence
from typing import Any

Resolver = Callable[..., Sequence[tuple[Any, ...]]]
"""``socket.getaddrinfo``'s signature (a test may pass its own)."""


def why_not_loopback(host: str, resolve: Resolver = socket.getaddrinfo) -> str | None:
    """``None`` when ``host`` is loopback (see the module docstring), else why not, as a
    phrase naming it: ``"'0.0.0.0' is not a loopback address"``, ``"'x.example'
    resolves to 203.0.113.5"``, ``"'x.example' could not be resolved here (…)"``."""
    if host == "localhost":
        return None
    if not host:
        return "'' is every interface"
    try:
        address = ipaddress.ip_address(host)
    except ValueError:
        pass
    else:
        return None if address.is_loopback else f"{host!r} is not a loopback address"
    try:
        infos = resolve(host, None, type=socket.SOCK_STREAM)
    except (OSError, UnicodeError) as exc:
        reason = getattr(exc, "strerror", None) or str(exc)
        return (f"{host!r} could not be resolved here ({reason}); a name counts as loopback "
                "only when it resolves to loopback addresses")
    addresses = sorted({str(info[4][0]) for info in infos})
    if not addresses:
        return f"{host!r} resolves to no address"
    outside = [a for a in addresses if not _loopback_literal(a)]
    if outside:
        return f"{host!r} resolves to {', '.join(outside)}"
    return None


def is_loopback(host: str, resolve: Resolver = socket.getaddrinfo) -> bool:
    """Whether ``host`` keeps a server on this machine (:func:`why_not_loopback`)."""
    return why_not_loopback(host, resolve) is None


def _loopback_literal(address: str) -> bool:
    try:
        return ipaddress.ip_address(address.split("%", 1)[0]).is_loopback
    except ValueError:
        return False


__all__ = ["Resolver", "is_loopback", "why_not_loopback"]
