"""A template whose configurations misbehave on purpose, for fault-injection tests:
`mode` = ok | crash (segfault) | hang | wrong | raise, each when run, or build_crash |
build_hang while it builds."""

from __future__ import annotations

import ctypes
import time

from woodpecker.tasks.space import Knob, KnobSpace


def space(task, vector_registers=16):
    return KnobSpace([Knob("mode", ("ok", "crash", "hang", "wrong", "raise", "build_crash",
                                     "build_hang"))])


def weights(task, config, w):
    return w


def build(task, config, threads=2):
    mode = config["mode"]
    if mode == "raise":
        raise RuntimeError("Halide: cannot schedule this")
    if mode == "build_crash":
        ctypes.string_at(0)
    if mode == "build_hang":
        time.sleep(3600)

    def run(*inputs):
        if mode == "crash":
            ctypes.string_at(0)  # reads address 0: SIGSEGV
        if mode == "hang":
            time.sleep(3600)
        out = task.reference(list(inputs))
        return out + 1.0 if mode == "wrong" else out

    return run
