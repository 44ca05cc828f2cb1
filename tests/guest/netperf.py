#!/usr/bin/env python3
"""TCP checks between two guests (tests/guest/net.sh runs it in each).

serve PORT: answers two connections in turn and exits. Each sends a mode line ("exact\\n"
or "bulk\\n"), then data until it shuts down its side; the reply is "LEN SHA256\\n" of
what arrived.
send HOST PORT MODE SIZE: sends SIZE bytes of a seeded pseudo-random stream and prints
what the peer got; "exact" prints both hashes, "bulk" the rate (retries the connect for
up to 300 s: the peer may still be booting).
"""
import hashlib
import random
import socket
import sys
import time

CHUNK = 1 << 16


def data(size):
    return random.Random(11).randbytes(size)


def serve(port):
    with socket.create_server(("0.0.0.0", port)) as srv:
        for _ in range(2):
            conn, _ = srv.accept()
            with conn:
                f = conn.makefile("rb")
                mode = f.readline().strip().decode()
                h, n = hashlib.sha256(), 0
                while True:
                    b = f.read1(CHUNK)
                    if not b:
                        break
                    h.update(b)
                    n += len(b)
                conn.sendall(f"{n} {h.hexdigest()}\n".encode())
                print(f"served {mode}: {n} bytes sha256 {h.hexdigest()}", flush=True)


def connect(host, port):
    deadline = time.monotonic() + 300
    while True:
        try:
            return socket.create_connection((host, port), timeout=60)
        except OSError:
            if time.monotonic() > deadline:
                raise
            time.sleep(1)


def send(host, port, mode, size):
    payload = data(size)
    with connect(host, port) as s:
        s.settimeout(600)
        t0 = time.monotonic()
        s.sendall(f"{mode}\n".encode())
        s.sendall(payload)
        s.shutdown(socket.SHUT_WR)
        reply = s.makefile("rb").readline().decode().split()
        secs = time.monotonic() - t0
    mine = hashlib.sha256(payload).hexdigest()
    if mode == "exact":
        print(f"exact: sent {size} bytes sha256 {mine}; peer got {reply[0]} bytes sha256 {reply[1]}")
    else:
        ok = "intact" if reply == [str(size), mine] else "CORRUPT"
        print(f"bulk: {size} bytes in {secs:.2f} s: {size * 8 / secs / 1e6:.1f} Mbit/s ({ok})")


if __name__ == "__main__":
    if sys.argv[1] == "serve":
        serve(int(sys.argv[2]))
    else:
        send(sys.argv[2], int(sys.argv[3]), sys.argv[4], int(sys.argv[5]))
