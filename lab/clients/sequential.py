"""The study's stage-2 recovery pattern, as a preset of the reference client.

recovery.py in the resume study detected a loss with pings every 0.5 s and 2 s of silence, tried to
resume for 4 s (an attempt at detection, then one per second) while sending a close on the old
socket, and only then opened a new session. It is the baseline `lab bench recovery` compares the
reference client with: the same code, only the timing policy differs.
"""
from __future__ import annotations

from lab.clients.recovery import RecoveryClient


class SequentialRecoveryClient(RecoveryClient):
    name = "recovery-sequential"
    DEFAULTS = {
        **RecoveryClient.DEFAULTS,
        "ping_interval_s": 0.5,
        "lost_after_s": 2.0,
        "resume_window_s": 4.0,         # refusals retried inside it, one per second
        "retry_refused_after_s": 1.0,
        "hedge": False,                 # the new session only after the window
        "tcp_witness": False,           # the study's rule: silence alone
        "prepare_on_suspect": False,
    }
