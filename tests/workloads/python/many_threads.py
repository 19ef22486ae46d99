"""Python with many threads: argv[2] threads wait on an event (each with
its thread state ahead of the main thread's in the interpreter's list),
while the main thread runs the 70:30 split of split.py for argv[1]
seconds; "ready" on stdout once they all run."""

import sys
import threading
import time

sys.path.insert(0, __file__.rsplit("/", 1)[0])
import split  # noqa: E402  (runs nothing on import)


def main(seconds, threads):
    stop = threading.Event()
    waiters = [threading.Thread(target=stop.wait) for _ in range(threads)]
    for waiter in waiters:
        waiter.start()
    split.main(seconds)
    stop.set()


main(float(sys.argv[1]), int(sys.argv[2]))
