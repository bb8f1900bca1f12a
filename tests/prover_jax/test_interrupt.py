"""prover_jax.interrupt: the first SIGINT or SIGTERM waits for the step's end, a second acts."""

from __future__ import annotations

import os
import signal
import threading
import time

import pytest

from prover_jax.interrupt import Interrupted, deferred_signals


def test_the_first_signal_is_recorded_and_the_second_acts():
    # Python's own SIGINT handler before, whatever an earlier test in this process left there
    inherited = signal.signal(signal.SIGINT, signal.default_int_handler)
    try:
        _first_recorded_then_second_acts()
    finally:
        signal.signal(signal.SIGINT, inherited)


def _first_recorded_then_second_acts():
    before = signal.getsignal(signal.SIGINT)
    with deferred_signals() as received:
        assert received() is None
        os.kill(os.getpid(), signal.SIGINT)
        assert received() == signal.SIGINT
        with pytest.raises(KeyboardInterrupt):
            os.kill(os.getpid(), signal.SIGINT)
            for _ in range(50):  # let the handler run, however busy the other threads are
                time.sleep(0.1)
    assert signal.getsignal(signal.SIGINT) is before
    with deferred_signals() as received:
        os.kill(os.getpid(), signal.SIGTERM)
        assert received() == signal.SIGTERM


def test_off_the_main_thread_nothing_is_deferred():
    seen = []
    thread = threading.Thread(target=lambda: seen.append(deferred_signals().__enter__()()))
    thread.start()
    thread.join()
    assert seen == [None]


def test_the_message_says_how_to_resume():
    stopped = Interrupted(signal.SIGTERM, 5, "runs/a")  # as the progress line's "step 5/N"
    assert str(stopped) == ("stopped by SIGTERM after step 5: saved; resume it with the same "
                            "command (--run-dir runs/a)")
    assert stopped.exit_code == 143
    assert "nothing was kept" in str(Interrupted(signal.SIGINT, 1, None))
