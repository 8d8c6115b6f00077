"""Start-up on a minimal Linux: missing xcb libraries give the exact apt-get line, not Qt's abort."""

from __future__ import annotations

from pathlib import Path

from app.gui import launch, platform_check


def test_the_check_names_every_missing_library_and_the_install_line(monkeypatch) -> None:
    monkeypatch.setattr(platform_check.sys, "platform", "linux")
    monkeypatch.setenv("QT_QPA_PLATFORM", "xcb")
    # ldd reporting two libraries absent, as on a minimal Debian.
    message = platform_check.check_display_libraries(
        ldd=lambda _plugin: {"libxcb-icccm.so.4", "libxcb-keysyms.so.1"}, plugin=Path("libqxcb.so")
    )
    assert message is not None
    assert "sudo apt-get install -y libxcb-icccm4 libxcb-keysyms1\n" in message
    # Without ldd: every library find_library cannot see is listed, in a stable order.
    message = platform_check.check_display_libraries(ldd=lambda _plugin: None, find=lambda _name: None)
    assert (
        "sudo apt-get install -y libxcb-icccm4 libxcb-keysyms1 libxcb-image0 libxcb-render-util0 "
        "libxkbcommon-x11-0 libxcb-cursor0" in message
    )
    # All present: Qt may start.
    assert platform_check.check_display_libraries(ldd=lambda _plugin: set(), plugin=Path("x")) is None


def test_other_platforms_are_not_checked(monkeypatch) -> None:
    monkeypatch.setenv("QT_QPA_PLATFORM", "offscreen")
    assert platform_check.check_display_libraries(ldd=lambda _p: {"libxcb-icccm.so.4"}) is None


def test_launch_prints_the_line_and_exits_instead_of_aborting(monkeypatch, capsys, registry) -> None:
    monkeypatch.setattr(platform_check.sys, "platform", "linux")
    monkeypatch.setenv("QT_QPA_PLATFORM", "xcb")
    monkeypatch.setattr(platform_check, "_ldd_missing", lambda _plugin: {"libxcb-cursor.so.0"})
    assert launch(None, registry) == 1
    err = capsys.readouterr().err
    assert "sudo apt-get install -y libxcb-cursor0" in err
