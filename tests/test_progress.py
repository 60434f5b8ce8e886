"""SPEC I5: the progress display as a user sees it, captured from a short training run: periodic plain
lines when stderr is not a terminal (logs, CI), a live bar when it is one (a pseudo-terminal here)."""

from __future__ import annotations

import io
import os
import re
import sys
import threading

import pytest

import advantage

STEPS = 5000
OVER = {
    "preset": "frozenlake",
    "trainer.total_steps": STEPS,
    "trainer.eval_every": 0,
    "trainer.tensorboard": False,
}
LINE = re.compile(r"^\[\s*(\d+)%\] step (\d+)/(\d+) \| ([\d,]+) steps/s \| return (\S+) \| eta (\S+)s$")


def test_lines_when_stderr_is_not_a_terminal(tmp_path, monkeypatch):
    err = io.StringIO()  # not a terminal: trainer.progress=auto picks the lines
    monkeypatch.setattr(sys, "stderr", err)
    advantage.train("q_learning", quiet=False, **OVER, **{"trainer.run_dir": str(tmp_path / "run")})
    text = err.getvalue()
    assert "\x1b" not in text and "\r" not in text  # no terminal control in a log
    lines = [m for m in map(LINE.match, text.splitlines()) if m]
    # One line every tenth of the run; the step and the percentage agree, and the last is the end.
    assert [int(m[2]) for m in lines] == [STEPS * k // 10 for k in range(1, 11)]
    assert all(int(m[3]) == STEPS and int(m[1]) == round(100 * int(m[2]) / STEPS) for m in lines)
    assert all(float(m[4].replace(",", "")) > 0 for m in lines)
    assert lines[-1][6] == "0"  # nothing left at the end
    assert any(m[5] != "-" for m in lines)  # episodes finished: the recent return is shown


@pytest.mark.skipif(not hasattr(os, "openpty"), reason="needs a pseudo-terminal")
def test_a_live_bar_on_a_terminal(tmp_path, monkeypatch):
    leader, follower = os.openpty()
    chunks: list[bytes] = []

    def drain() -> None:  # read while the run writes, so the terminal's buffer never fills
        while True:
            try:
                data = os.read(leader, 65536)
            except OSError:  # EIO: the writing side is closed
                return
            if not data:
                return
            chunks.append(data)

    reader = threading.Thread(target=drain, daemon=True)
    reader.start()
    tty = os.fdopen(follower, "w", buffering=1, encoding="utf-8")
    assert tty.isatty()
    monkeypatch.setenv("TERM", "xterm-256color")
    monkeypatch.setenv("COLUMNS", "120")
    monkeypatch.delenv("NO_COLOR", raising=False)
    monkeypatch.setattr(sys, "stderr", tty)
    advantage.train("q_learning", quiet=False, **OVER, **{"trainer.run_dir": str(tmp_path / "run")})
    tty.close()
    reader.join(timeout=30)
    os.close(leader)
    out = b"".join(chunks).decode(errors="replace")
    assert not LINE.search(out)  # not the plain lines
    assert "\x1b[" in out  # terminal control: the bar is redrawn in place
    assert "q_learning" in out  # the description
    assert f"{STEPS}/{STEPS}" in out  # the last redraw shows the run complete
    assert "steps/s" in out and "return" in out
