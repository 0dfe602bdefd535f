# slurm_lib.sh: a one-node Slurm cluster of the test's own, sourced (not a test itself): a munge
# key, a generated slurm.conf and state in a temporary directory, munged, slurmctld and slurmd
# started as children of the test on ports of their own, and torn down (jobs cancelled,
# daemons stopped, directory removed) by slurm_stop, which the caller's EXIT trap runs.
# Needs root (slurmd starts tasks as any user) and Debian's slurmctld, slurmd, munge.

# slurm_can_run: empty when a cluster can start here, else why not.
slurm_can_run() {
    [ "$(id -u)" -eq 0 ] || { echo "not root (slurmd runs tasks as their user; CI runs as root)"; return; }
    local p
    for p in munged slurmctld slurmd srun sbatch salloc sinfo scancel; do
        command -v "$p" >/dev/null 2>&1 || PATH=$PATH:/usr/sbin command -v "$p" >/dev/null 2>&1 ||
            { echo "$p missing (scripts/setup.sh installs slurmctld, slurmd, slurm-client, munge)"; return; }
    done
}

# slurm_free_ports: three free ports below the kernel's ephemeral range.
slurm_free_ports() {
    "${COHORT_PYTHON:-/usr/bin/python3}" -c 'import random, socket
lo = int(open("/proc/sys/net/ipv4/ip_local_port_range").read().split()[0])
for _ in range(1000):
    p = random.randrange(20000, min(lo, 29000) - 3)
    try:
        s = [socket.socket() for _ in range(3)]
        for i, x in enumerate(s):
            x.bind(("", p + i))
        for x in s:
            x.close()
        print(p, p + 1, p + 2); break
    except OSError:
        pass'
}

slurm_dir= slurm_pids=()
# slurm_start: the cluster up with every cpu of this machine as one node (SLURM_CONF exported);
# returns non-zero (with the daemons' logs printed) when the node does not come up in 30 s.
slurm_start() {
    export PATH=$PATH:/usr/sbin
    slurm_dir=$(mktemp -d /tmp/cohort-slurm.XXXXXX)
    chmod 755 "$slurm_dir"
    local d=$slurm_dir host cpus ports mem
    mkdir -p "$d/state" "$d/spool" "$d/log" "$d/run"
    host=$(hostname -s)
    cpus=$(nproc)
    mem=$(($(awk '/MemTotal/ {print $2}' /proc/meminfo) / 2048))
    read -r -a ports <<<"$(slurm_free_ports)"
    head -c 1024 /dev/urandom > "$d/munge.key"
    chmod 400 "$d/munge.key"
    cat > "$d/slurm.conf" <<EOF
ClusterName=cohorttest
SlurmctldHost=$host
SlurmctldPort=${ports[0]}
SlurmdPort=${ports[1]}
SrunPortRange=${ports[2]}-$((ports[2] + 60))
AuthType=auth/munge
CredType=cred/munge
AuthInfo=socket=$d/munge.sock
SlurmUser=root
SlurmdUser=root
StateSaveLocation=$d/state
SlurmdSpoolDir=$d/spool
SlurmctldPidFile=$d/run/slurmctld.pid
SlurmdPidFile=$d/run/slurmd.pid
SlurmctldLogFile=$d/log/slurmctld.log
SlurmdLogFile=$d/log/slurmd.log
ProctrackType=proctrack/linuxproc
TaskPlugin=task/none
SchedulerType=sched/builtin
SelectType=select/cons_tres
SelectTypeParameters=CR_Core
MpiDefault=none
ReturnToService=2
KillWait=2
MinJobAge=2
InactiveLimit=0
NodeName=$host CPUs=$cpus RealMemory=$mem State=UNKNOWN
PartitionName=test Nodes=ALL Default=YES MaxTime=INFINITE State=UP OverSubscribe=YES
EOF
    export SLURM_CONF=$d/slurm.conf
    munged -F --force -S "$d/munge.sock" --key-file="$d/munge.key" --log-file="$d/log/munged.log" \
        --pid-file="$d/run/munged.pid" --seed-file="$d/munged.seed" >"$d/log/munged.out" 2>&1 &
    slurm_pids+=($!)
    for _ in $(seq 600); do [ -S "$d/munge.sock" ] && break; sleep 0.1; done
    slurmctld -D -i -f "$SLURM_CONF" >"$d/log/slurmctld.out" 2>&1 &
    slurm_pids+=($!)
    slurmd -D -f "$SLURM_CONF" >"$d/log/slurmd.out" 2>&1 &
    slurm_pids+=($!)
    for _ in $(seq 600); do # up to 120 s: a loaded machine
        sinfo -h -o %t 2>/dev/null | grep -qE '^(idle|mix|alloc)' && return 0
        sleep 0.2
    done
    echo "slurm did not come up:"
    tail -5 "$d"/log/*
    return 1
}

# slurm_stop: cancel every job, stop the daemons (slurmd's step daemons with them), remove the
# directory. Safe to call twice.
slurm_stop() {
    [ -n "$slurm_dir" ] || return 0
    scancel --full --quiet -u root 2>/dev/null
    local p i
    for i in $(seq 20); do squeue -h 2>/dev/null | grep -q . || break; sleep 0.2; done
    # the step daemons of this cluster: slurmstepd processes whose spool is ours
    for p in $(pgrep -x slurmstepd); do
        grep -qF "$slurm_dir" "/proc/$p/cmdline" "/proc/$p/environ" 2>/dev/null && kill "$p" 2>/dev/null
    done
    for ((i = ${#slurm_pids[@]} - 1; i >= 0; i--)); do
        kill "${slurm_pids[$i]}" 2>/dev/null
    done
    for p in "${slurm_pids[@]}"; do
        for i in $(seq 50); do kill -0 "$p" 2>/dev/null || break; sleep 0.1; done
        kill -9 "$p" 2>/dev/null
        wait "$p" 2>/dev/null
    done
    slurm_pids=()
    rm -rf "$slurm_dir"
    slurm_dir=
}
