"""Before Qt starts on Linux/X11: are the system libraries of Qt's xcb platform plugin there?

Lives here: `XCB_PACKAGES`, `missing_libraries`, `install_line`, `check_display_libraries`, `main`.
May import: stdlib only (it runs before Qt is imported, so that Qt's abort never reaches the user).

Without them Qt aborts with a message naming only libxcb-cursor0 (FINDINGS). We ask `ldd` which
libraries the plugin cannot resolve (falling back to `ctypes.util.find_library` where `ldd` is absent)
and print the one `apt-get install` line that fixes it. `python -m app.gui.platform_check` runs the check.
"""

from __future__ import annotations

import ctypes.util
import importlib.util
import os
import subprocess
import sys
from collections.abc import Callable
from pathlib import Path

# Shared-object name (as `ldd` prints it) -> the Debian/Ubuntu package that ships it.
XCB_PACKAGES: dict[str, str] = {
    "libxcb-icccm.so.4": "libxcb-icccm4",
    "libxcb-keysyms.so.1": "libxcb-keysyms1",
    "libxcb-image.so.0": "libxcb-image0",
    "libxcb-render-util.so.0": "libxcb-render-util0",
    "libxkbcommon-x11.so.0": "libxkbcommon-x11-0",
    "libxcb-cursor.so.0": "libxcb-cursor0",
}


def _xcb_plugin() -> Path | None:
    spec = importlib.util.find_spec("PySide6")
    if spec is None or not spec.submodule_search_locations:
        return None
    plugin = Path(next(iter(spec.submodule_search_locations))) / "Qt" / "plugins" / "platforms" / "libqxcb.so"
    return plugin if plugin.exists() else None


def _ldd_missing(plugin: Path) -> set[str] | None:
    """Sonames `ldd` reports as "not found" for the plugin; None when ldd cannot tell."""
    try:
        out = subprocess.run(["ldd", str(plugin)], capture_output=True, text=True, timeout=20).stdout
    except (OSError, subprocess.SubprocessError):
        return None
    return {line.split("=>")[0].strip() for line in out.splitlines() if "not found" in line}


def _find_library_missing(find: Callable[[str], str | None]) -> set[str]:
    # find_library wants "xcb-icccm" for libxcb-icccm.so.4.
    return {so for so in XCB_PACKAGES if not find(so.removeprefix("lib").split(".so")[0])}


def missing_libraries(
    *,
    ldd: Callable[[Path], set[str] | None] | None = None,
    find: Callable[[str], str | None] | None = None,
    plugin: Path | None = None,
) -> list[str]:
    """Debian packages to install for the xcb plugin, in `XCB_PACKAGES` order; [] when all are there."""
    plugin = plugin or _xcb_plugin()
    missing = (ldd or _ldd_missing)(plugin) if plugin is not None else None
    if missing is None:
        missing = _find_library_missing(find or ctypes.util.find_library)
    return [pkg for so, pkg in XCB_PACKAGES.items() if so in missing]


def install_line(packages: list[str]) -> str:
    return "sudo apt-get install -y " + " ".join(packages)


def uses_xcb(platform: str = sys.platform, environ: os._Environ[str] | dict[str, str] = os.environ) -> bool:
    """Qt will pick its xcb plugin: Linux, and no other platform asked for (offscreen, wayland...)."""
    if not platform.startswith("linux"):
        return False
    wanted = environ.get("QT_QPA_PLATFORM", "")
    if wanted:
        return wanted.startswith("xcb")
    return not environ.get("WAYLAND_DISPLAY")


def check_display_libraries(**kwargs: object) -> str | None:
    """The message to print instead of starting Qt, or None when Qt can start."""
    if not uses_xcb():
        return None
    packages = missing_libraries(**kwargs)  # type: ignore[arg-type]
    if not packages:
        return None
    return (
        "Nodeloom cannot open a window: Qt's X11 (xcb) plugin needs system libraries that are missing:\n"
        f"  {', '.join(packages)}\n"
        "Install them with:\n"
        f"  {install_line(packages)}\n"
        "(or run headless: app --run WORKFLOW.json)"
    )


def main() -> int:
    message = check_display_libraries()
    if message:
        print(message, file=sys.stderr)
        return 1
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
