"""A pure-Python CPU burner at a known 70:30 split: hot_a does 70 units of
work for every 30 of hot_b, until argv[1] seconds have passed; "ready" on
stdout once in the loop. A step (both) takes some 50 us, far below a
sampling period, so that no sampler's period can alias with it. Each
round goes through C (sum over map), which calls back into the
interpreter: a stack holds two of its calls."""

import sys
import time


def spin(n):
    acc = 0
    for i in range(n):
        acc = (acc * 31 + i) & 0xFFFF
    return acc


def hot_a(n):
    return spin(n)


def hot_b(n):
    return spin(n)


def step(_round):
    return hot_a(700) ^ hot_b(300)


def main(seconds):
    end = time.monotonic() + seconds
    ready = False
    while time.monotonic() < end:
        sum(map(step, range(100)))
        if not ready:
            print("ready", flush=True)
            ready = True


if __name__ == "__main__":
    main(float(sys.argv[1]))
