"""The symbolic upgrade of a numeric verdict: the two sides shown equal, or different, as rational
functions of explicit small symbolic matrices (:mod:`derivations.engine.symbolic`), each proof under a
time limit (``SIGALRM``; a proof that takes longer leaves the verdict numeric)."""

from __future__ import annotations

import contextlib
import signal
import threading

from derivations.engine.symbolic import verify_equal

SYMBOLIC_SECONDS = 2.0  # a symbolic proof that takes longer leaves the verdict numeric


class _TimeUp(Exception):
    pass


@contextlib.contextmanager
def _time_limit(seconds):
    """Interrupt the block after ``seconds`` (main thread only; elsewhere it runs unbounded)."""
    if threading.current_thread() is not threading.main_thread() or not hasattr(signal, "setitimer"):
        yield
        return

    def handler(signum, frame):
        raise _TimeUp

    old = signal.signal(signal.SIGALRM, handler)
    signal.setitimer(signal.ITIMER_REAL, seconds)
    try:
        yield
    finally:
        signal.setitimer(signal.ITIMER_REAL, 0)
        signal.signal(signal.SIGALRM, old)


def _symbolic_status(ref, cand, target) -> str:
    """The exact check of a pair the numbers could not tell apart: ``"verified"`` (equal as rational functions
    of the entries), ``"refuted"`` (different as rational functions, in the model with facts where the generic
    one does not show them equal), or ``"not modelled"`` (no polynomial model, or out of time). It runs
    whatever the numeric verdict: ``(B + 10^-60 A) − B`` and ``0`` agree to 50 digits on every instance, and
    differ exactly."""
    try:
        with _time_limit(SYMBOLIC_SECONDS):
            return verify_equal([(ref, cand)], target.symbolic_dims, target.definitions).status
    except _TimeUp:
        return "not modelled"


def _symbolic_different(ref, cand, target) -> bool:
    """The two sides differ as rational functions, in the model with facts where the generic one does not show them
    equal (an isometry or a Gram root the generic model would leave unrelated to its matrix refutes nothing)."""
    try:
        with _time_limit(SYMBOLIC_SECONDS):
            return verify_equal([(ref, cand)], target.symbolic_dims, target.definitions).status == "refuted"
    except _TimeUp:
        return False


__all__ = ["SYMBOLIC_SECONDS"]
