# port_lib.sh: a master port for the launch tests that start launchers on loopback; sourced (not a
# test itself). Needs PY (a python3).
#
# free_port: a port P with P + 1 (the control port) free too, below the kernel's ephemeral range,
# so that no other test's outgoing connection takes either between this check and the bind (an
# ephemeral port once led node 0 to fail and node 1 to wait out its join timeout).
free_port() {
    "$PY" -c 'import random, socket
lo = int(open("/proc/sys/net/ipv4/ip_local_port_range").read().split()[0])
for _ in range(1000):
    p = random.randrange(20000, min(lo, 29000) - 1)
    try:
        a, b = socket.socket(), socket.socket()
        a.bind(("", p)); b.bind(("", p + 1))
        a.close(); b.close()
        print(p); break
    except OSError:
        pass'
}
