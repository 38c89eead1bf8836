"""The pet (or the workbench) in a native window through pywebview, the optional ``memmy[pet]`` extra: the same
page as in a browser, in a small always-on-top window where the OS allows one."""

from __future__ import annotations

PET_SIZE = (420, 640)
WORKBENCH_SIZE = (1280, 820)
MISSING = "the native window needs pywebview: pip install 'memmy[pet]'"


def available() -> bool:
    """Whether pywebview can be imported."""
    try:
        import webview  # noqa: F401 - only whether it is there
    except ImportError:
        return False
    return True


def open_window(link: str, pet: bool) -> None:
    """Open ``link`` (a one-time sign-in link) in a native window and run its event loop until it is closed."""
    import webview

    width, height = PET_SIZE if pet else WORKBENCH_SIZE
    webview.create_window("memmy" if pet else "Memmy workbench", link, width=width, height=height, on_top=pet)
    webview.start()
