"""Small checks for deploy/local.sh, run with the app's Python (standard library and redis-py only).

    probe.py busy PORT            exit 1 when 127.0.0.1:PORT cannot be bound (something listens there)
    probe.py free N               print N free loopback ports, space-separated
    probe.py redis URL SECONDS    wait until Redis at URL answers PING (exit 1 after SECONDS)
    probe.py http SECONDS PIDS URLS
                                  wait until every URL (space-separated) answers HTTP 200; exit 1 when one of
                                  PIDS (space-separated) exits first, or after SECONDS
The reason for a failure is one line on standard error.
"""

from __future__ import annotations

import os
import socket
import sys
import time
import urllib.request


def busy(port: int) -> int:
    with socket.socket() as s:
        # as HAProxy binds: connections of an earlier run still in TIME_WAIT do not make the port busy
        s.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
        try:
            s.bind(("127.0.0.1", port))
            s.listen()
        except OSError:
            return 1
    return 0


def free(n: int) -> int:
    socks = [socket.socket() for _ in range(n)]  # all bound at once: n different ports
    try:
        for s in socks:
            s.bind(("127.0.0.1", 0))
        print(" ".join(str(s.getsockname()[1]) for s in socks))
    finally:
        for s in socks:
            s.close()
    return 0


def wait_redis(url: str, seconds: float) -> int:
    import redis
    client, end = redis.Redis.from_url(url, socket_timeout=1, socket_connect_timeout=1), time.monotonic() + seconds
    while True:
        try:
            client.ping()
            return 0
        except redis.RedisError as e:
            if time.monotonic() > end:
                print(f"Redis at {url} does not answer: {e}", file=sys.stderr)
                return 1
            time.sleep(0.1)


def wait_http(seconds: float, pids: list[int], urls: list[str]) -> int:
    end = time.monotonic() + seconds
    while urls:
        for pid in pids:
            try:
                os.kill(pid, 0)
            except ProcessLookupError:
                print(f"process {pid} exited", file=sys.stderr)
                return 1
        try:
            with urllib.request.urlopen(urls[0], timeout=2) as r:
                if r.status == 200:
                    urls.pop(0)
                    continue
        except OSError:
            pass
        if time.monotonic() > end:
            print(f"{urls[0]} did not answer within {seconds:g} s", file=sys.stderr)
            return 1
        time.sleep(0.2)
    return 0


def main(argv: list[str]) -> int:
    cmd, args = argv[0], argv[1:]
    if cmd == "busy":
        return busy(int(args[0]))
    if cmd == "free":
        return free(int(args[0]))
    if cmd == "redis":
        return wait_redis(args[0], float(args[1]))
    if cmd == "http":
        return wait_http(float(args[0]), [int(p) for p in args[1].split()], args[2].split())
    print(f"unknown command {cmd!r}", file=sys.stderr)
    return 2


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
