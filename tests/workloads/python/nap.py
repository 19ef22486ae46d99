"""A Python thread that waits: nap sleeps 10 ms at a time, until argv[1]
seconds have passed; "ready" on stdout once in the loop."""

import sys
import time


def nap():
    time.sleep(0.01)


def main(seconds):
    end = time.monotonic() + seconds
    print("ready", flush=True)
    while time.monotonic() < end:
        nap()


main(float(sys.argv[1]))
