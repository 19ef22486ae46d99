"""Python frames for the bench: every thread of CPU burns at the bottom
of a recursion argv[1] calls deep, for argv[2] seconds."""

import sys
import time


def burn(depth, end):
    if depth > 0:
        return burn(depth - 1, end)
    acc = 0
    while time.monotonic() < end:
        for i in range(10000):
            acc = (acc + i) & 0xFFFF
    return acc


burn(int(sys.argv[1]), time.monotonic() + float(sys.argv[2]))
