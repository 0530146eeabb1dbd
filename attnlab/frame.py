"""A standalone page shown in a notebook: in an <iframe srcdoc> of its own, sandboxed to scripts (StandaloneView's
view, and attnlab.show's widget's fallback where widgets cannot run)."""

from __future__ import annotations

import html


def iframe(page: str, height: int) -> str:
    """The page in an iframe of its own: `srcdoc` (no file, no server), scripts allowed and nothing else (no access
    to the notebook's document, cookies or storage)."""
    return (
        f'<iframe srcdoc="{html.escape(page, quote=True)}" sandbox="allow-scripts" title="attnlab" '
        f'style="width: 100%; height: {int(height)}px; border: 1px solid #ccc; border-radius: 6px;"></iframe>'
    )
