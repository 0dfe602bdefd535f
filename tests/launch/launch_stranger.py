"""launch_stranger.py: a stranger at a cohort run control port, for test_launch_strangers.sh.
MODE HOST PORT [ARG]: nosecret (a well-formed handshake under the empty key, i.e. without the
job's secret), wrongnn (the same with --nnodes 3), replay FILE (a HELLO captured from a real
launcher, sent against a fresh challenge), big (a 1 MiB line), silent (connects, says nothing);
capture PORT FILE (plays node 0 to a real launcher and keeps its HELLO; FILE.ready says it
listens). Prints "MODE: connected" once connected, then how long node 0 took to close the
connection after the stranger's last word (or its connect, when silent)."""
import hashlib
import hmac
import os
import socket
import sys
import time


def mac(key, label, a, b):
    return hmac.new(key, f"{label}|{a}|{b}".encode(), hashlib.sha256).hexdigest()


def read_line(s):
    buf = b""
    while not buf.endswith(b"\n"):
        c = s.recv(1)
        if not c:
            break
        buf += c
    return buf.decode(errors="replace").strip()


def wait_closed(s, t0):
    s.settimeout(60)
    try:
        while s.recv(65536):
            pass
    except OSError:
        pass
    return time.monotonic() - t0


def connect(host, port):
    for _ in range(1200):  # node 0 may take long to come up on a loaded machine
        try:
            return socket.create_connection((host, port), timeout=60)
        except OSError:
            time.sleep(0.05)
    sys.exit(f"stranger: cannot connect to {host}:{port}")


def main():
    mode, host, port = sys.argv[1], sys.argv[2], int(sys.argv[3])
    if mode == "capture":
        ls = socket.socket()
        ls.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
        ls.bind((host, port))
        ls.listen(1)
        open(sys.argv[4] + ".ready", "w").close()
        c, _ = ls.accept()
        c.sendall(b"CHAL " + os.urandom(16).hex().encode() + b"\n")
        open(sys.argv[4], "w").write(read_line(c) + "\n")
        return
    s = connect(host, port)
    t0 = time.monotonic()
    print(f"{mode}: connected", flush=True)
    if mode == "silent":
        print(f"{mode}: closed after {wait_closed(s, t0):.3f} s", flush=True)
        return
    chal = read_line(s).split()
    if mode in ("nosecret", "wrongnn"):
        nn = 3 if mode == "wrongnn" else 2
        body = f"HELLO 1 {nn} 2 node1 {os.urandom(16).hex()}"
        line = body + " " + mac(b"", "hello", chal[1], body) + "\n"
    elif mode == "replay":
        line = open(sys.argv[4]).read()
    else:
        line = "A" * (1 << 20) + "\n"
    t0 = time.monotonic()
    try:
        s.sendall(line.encode())
    except OSError:
        pass
    print(f"{mode}: closed after {wait_closed(s, t0):.3f} s", flush=True)


main()
