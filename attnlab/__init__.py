"""attnlab for scripts and notebooks.

- `attnlab.Client(url)`: the REST API of a running `attnlab serve`, one method per endpoint, NumPy arrays out
  (needs only httpx and NumPy).
- `attnlab.run(model, text, masks=..., layer=...)`: the same result in this process, no server (needs the engine:
  torch and the server's schemas).
- `attnlab.ApiError`: what both raise for a request the API refuses: status, code, field, message, details.

Client and run are imported on first use, so each works with only its own dependencies installed.
"""

from __future__ import annotations

from typing import TYPE_CHECKING, Any

from attnlab.errors import ApiError

if TYPE_CHECKING:
    from attnlab.client import Client
    from attnlab.local import run

__all__ = ["ApiError", "Client", "run"]


def __getattr__(name: str) -> Any:
    if name == "Client":
        from attnlab.client import Client

        return Client
    if name == "run":
        from attnlab.local import run

        return run
    raise AttributeError(f"module 'attnlab' has no attribute {name!r}")
