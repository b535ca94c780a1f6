"""crawler-gateway's renderer: pages run in Debian's Chromium (Playwright), every request they make
guarded and fetched by the gateway itself, so render_js answers carry the DOM after scripts ran."""

from crawler.gateway.render.options import RenderAsk, RenderConfig, render_options
from crawler.gateway.render.renderer import Document, Rendered, Renderer, RenderFailed

__all__ = [
    "Document",
    "RenderAsk",
    "RenderConfig",
    "RenderFailed",
    "Rendered",
    "Renderer",
    "render_options",
]
