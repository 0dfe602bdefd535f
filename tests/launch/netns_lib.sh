# netns_lib.sh: two "hosts" on one machine, sourced (not a test itself) by the namespace tests
# and bench/cluster/run.sh. Each node is a network namespace (iproute2) joined to the other by
# a veth pair whose both ends are rate-shaped with tc tbf; a process started as a node also gets
# its own host name (a UTS namespace: node0, node1) and its own /dev/shm (a mount namespace with
# a fresh tmpfs), so shared memory reaches only inside a node, as on a cluster. Open MPI starts
# its daemons on the other node through netns_agent (its rsh launch agent). netns_down (run it
# from an EXIT trap) removes the namespaces, their links and qdiscs, and the hosts files.
# netns_up_bridge makes N nodes on one switch instead, whose links netns_cut can pull.
# Needs root.

netns_ids=() netns_dir= netns_agent= netns_br=

# Timing helpers of the tests that measure: now (seconds, as a string), secs T0 T1 (T1 - T0 to
# 0.01 s; needs $py), wait_for SECONDS CMD... (until CMD succeeds, polled every 50 ms; 1 after
# SECONDS).
now() { date +%s.%N; }
secs() { "$py" -c "import sys; print('%.2f' % (float(sys.argv[2]) - float(sys.argv[1])))" "$1" "$2"; }
wait_for() {
    local end=$(($(date +%s) + $1))
    shift
    until "$@"; do
        [ "$(date +%s)" -ge $end ] && return 1
        sleep 0.05
    done
}
NETNS_SUBNET=10.231.0 # the link's addresses: node K is $NETNS_SUBNET.(K+1)

# netns_can_run: empty when namespaces can be made here, else why not.
netns_can_run() {
    [ "$(id -u)" -eq 0 ] || { echo "not root (network namespaces, veth and tc need it; CI runs as root)"; return; }
    local p
    for p in ip tc unshare; do
        PATH=$PATH:/usr/sbin command -v "$p" >/dev/null 2>&1 || { echo "$p missing (iproute2, util-linux)"; return; }
    done
}

# netns_skip_unless_mpi: a namespace test's first step: exits 77 (skipped) saying why when the
# nodes cannot be made here or Open MPI or cohort's MPI plug-in is missing.
netns_skip_unless_mpi() {
    local why
    why=$(netns_can_run)
    [ -z "$why" ] || { echo "SKIP namespaces: $why"; exit 77; }
    command -v mpirun >/dev/null && [ -f "${COHORT_BUILD_DIR:-.}/libcohort_mpi.so" ] ||
        { echo "SKIP namespaces: mpirun or libcohort_mpi.so missing"; exit 77; }
}

# netns_up: nodes 0 and 1 with the link between them up and unshaped; the agent script written.
netns_up() {
    export PATH=$PATH:/usr/sbin
    local tag k
    tag=coh$$
    netns_dir=$(mktemp -d /tmp/cohort-netns.XXXXXX)
    chmod 755 "$netns_dir"
    netns_ids=("${tag}n0" "${tag}n1")
    for k in 0 1; do
        ip netns add "${netns_ids[$k]}" || return 1
        mkdir -p "/etc/netns/${netns_ids[$k]}"
        printf '127.0.0.1 localhost\n%s.1 node0\n%s.2 node1\n' "$NETNS_SUBNET" "$NETNS_SUBNET" \
            > "/etc/netns/${netns_ids[$k]}/hosts"
        echo "node$k" > "/etc/netns/${netns_ids[$k]}/hostname"
    done
    ip link add "${tag}v0" type veth peer name "${tag}v1" || return 1
    for k in 0 1; do
        ip link set "${tag}v$k" netns "${netns_ids[$k]}" &&
            ip -n "${netns_ids[$k]}" addr add "$NETNS_SUBNET.$((k + 1))/24" dev "${tag}v$k" &&
            ip -n "${netns_ids[$k]}" link set "${tag}v$k" up &&
            ip -n "${netns_ids[$k]}" link set lo up || return 1
    done
    netns_agent=$netns_dir/agent.sh
    # Open MPI calls its agent as ssh: AGENT HOST COMMAND WORDS...; the words form one shell
    # command run on the node (here: in its namespaces)
    cat > "$netns_agent" <<EOF
#!/usr/bin/env bash
# Open MPI's launch agent for the namespace nodes: runs the daemon's command as node HOST.
host=\$1
shift
case \$host in
node0) ns=${netns_ids[0]} ;;
node1) ns=${netns_ids[1]} ;;
*) echo "agent: unknown host '\$host' (node0, node1)" >&2; exit 1 ;;
esac
exec ip netns exec "\$ns" unshare --uts --mount sh -c "hostname \$host && mount -t tmpfs tmpfs /dev/shm && \$*"
EOF
    chmod 755 "$netns_agent"
}

# netns_up_bridge N: nodes 0..N-1, each joined by its own veth pair to a bridge in one more
# namespace (a switch), so that one node's link can be cut (netns_cut) while the others still
# reach each other. No agent, no shaping: for jobs that `cohort run` starts on each node.
netns_up_bridge() {
    export PATH=$PATH:/usr/sbin
    local n=$1 tag k hosts=
    tag=coh$$
    netns_dir=$(mktemp -d /tmp/cohort-netns.XXXXXX)
    chmod 755 "$netns_dir"
    netns_br=${tag}sw
    ip netns add "$netns_br" && ip -n "$netns_br" link add "${tag}br" type bridge &&
        ip -n "$netns_br" link set "${tag}br" up || return 1
    for ((k = 0; k < n; k++)); do hosts+="$NETNS_SUBNET.$((k + 1)) node$k"$'\n'; done
    netns_ids=()
    for ((k = 0; k < n; k++)); do
        netns_ids+=("${tag}n$k")
        ip netns add "${tag}n$k" || return 1
        mkdir -p "/etc/netns/${tag}n$k"
        printf '127.0.0.1 localhost\n%s' "$hosts" > "/etc/netns/${tag}n$k/hosts"
        echo "node$k" > "/etc/netns/${tag}n$k/hostname"
        ip link add "${tag}v$k" type veth peer name "${tag}b$k" &&
            ip link set "${tag}v$k" netns "${tag}n$k" && ip link set "${tag}b$k" netns "$netns_br" &&
            ip -n "$netns_br" link set "${tag}b$k" master "${tag}br" up &&
            ip -n "${tag}n$k" addr add "$NETNS_SUBNET.$((k + 1))/24" dev "${tag}v$k" &&
            ip -n "${tag}n$k" link set "${tag}v$k" up && ip -n "${tag}n$k" link set lo up || return 1
    done
}

# netns_cut K / netns_mend K: node K's cable pulled out of the switch (its port down: what it
# sends is lost, nothing reaches it, no FIN or RST either way) / plugged back in.
netns_cut() { ip -n "$netns_br" link set "${netns_br%sw}b$1" down; }
netns_mend() { ip -n "$netns_br" link set "${netns_br%sw}b$1" up; }

# netns_shape RATE: both ends of the link rate-shaped to RATE (tc's units: 10gbit, 1gbit,
# 100mbit), or "none" for no qdisc of ours.
netns_shape() {
    local k dev burst
    for k in 0 1; do
        dev=${netns_ids[$k]%n$k}v$k
        if [ "$1" = none ]; then
            ip netns exec "${netns_ids[$k]}" tc qdisc del dev "$dev" root 2>/dev/null
            continue
        fi
        # a burst of a millisecond at the rate (at least 64 KiB), 50 ms of queue
        case $1 in
        *gbit) burst=$(("${1%gbit}" * 125000)) ;;
        *mbit) burst=$(("${1%mbit}" * 125)) ;;
        *) echo "netns_shape: rate '$1': expected Ngbit or Nmbit" >&2; return 1 ;;
        esac
        [ "$burst" -lt 65536 ] && burst=65536
        ip netns exec "${netns_ids[$k]}" tc qdisc replace dev "$dev" root tbf rate "$1" \
            burst "$burst" latency 50ms || return 1
    done
}

# netns_node K COMMAND...: COMMAND as node K (its network, host name nodeK, its own /dev/shm),
# killed after NETNS_TIMEOUT seconds (default 600).
netns_node() {
    local k=$1
    shift
    timeout -s KILL "${NETNS_TIMEOUT:-600}" ip netns exec "${netns_ids[$k]}" unshare --uts --mount sh -c \
        'hostname "$0" && mount -t tmpfs tmpfs /dev/shm && exec "$@"' "node$k" "$@"
}

# netns_mpirun RANKS_PER_NODE MPIRUN_ARGS...: Open MPI's mpirun on node 0 starting RANKS_PER_NODE
# ranks on each node, its daemon on node 1 through the agent, both its out-of-band channel and
# its TCP transport over the shaped link (shared memory inside a node). The nodes share this
# machine's cpus, so Open MPI is told to yield when idle (it does not count the other node's
# ranks as oversubscription: busy-polling ranks then take 10-40 ms for a 64 KiB all-gather).
netns_mpirun() {
    local per=$1
    shift
    netns_node 0 mpirun --allow-run-as-root --oversubscribe --host "node0:$per,node1:$per" \
        -np $((2 * per)) --mca plm_rsh_agent "$netns_agent" --mca btl self,vader,tcp \
        --mca mpi_yield_when_idle 1 \
        --mca btl_tcp_if_include "$NETNS_SUBNET.0/24" --mca oob_tcp_if_include "$NETNS_SUBNET.0/24" \
        "$@"
}

# netns_down: every process left in the namespaces killed, the namespaces (and with them the
# veth pair and its qdiscs) deleted, the hosts files and the agent removed. Safe to call twice.
netns_down() {
    local ns p
    for ns in "${netns_ids[@]}"; do
        for p in $(ip netns pids "$ns" 2>/dev/null); do kill -9 "$p" 2>/dev/null; done
    done
    for ns in "${netns_ids[@]}"; do
        for _ in $(seq 20); do [ -z "$(ip netns pids "$ns" 2>/dev/null)" ] && break; sleep 0.1; done
        ip netns del "$ns" 2>/dev/null
        rm -rf "/etc/netns/${ns:?}"
    done
    netns_ids=()
    [ -n "$netns_br" ] && ip netns del "$netns_br" 2>/dev/null
    netns_br=
    [ -n "$netns_dir" ] && rm -rf "$netns_dir"
    netns_dir=
}
