"""The Memory panel: server-rendered pages at ``/panel`` on the daemon (Jinja2 templates, a little plain JS, all
assets in the package), its cookie sign-in with CSRF tokens, and its English and Chinese texts."""

from memmy.panel.auth import PanelAuth
from memmy.panel.routes import Panel

__all__ = ["Panel", "PanelAuth"]
