# proc_lib.sh: whether processes still run, for the launch tests that kill workers and launchers;
# sourced (not a test itself).
#
# alive PID: PID runs and is not a zombie (a zombie is gone: the init of a container may not reap
# the orphans of a killed launcher). The state is read once, from /proc/PID/stat: a pid looked up
# and then read separately could be reaped in between and read as alive.
alive() {
    local s
    s=$(cat "/proc/$1/stat" 2>/dev/null) || return 1
    [ -n "$s" ] && ! [[ $s =~ ^[0-9]+\ \(.*\)\ Z ]]
}
# all_gone PIDS...: every pid gone, waiting up to 60 s (a killed process takes a moment to end
# on a loaded machine, and an ASan build reaps slowly); when some stay, prints them (ps) and
# returns 1.
all_gone() {
    local p any
    for _ in $(seq 1200); do
        any=0
        for p in "$@"; do alive "$p" && any=1; done
        [ $any -eq 0 ] && return 0
        sleep 0.05
    done
    echo "still running:"
    for p in "$@"; do alive "$p" && ps -o pid=,stat=,args= -p "$p"; done
    return 1
}
# zombie PID: PID has ended but its parent has not reaped it (a stopped launcher's worker).
zombie() { grep -qE '^[0-9]+ \(.*\) Z' "/proc/$1/stat" 2>/dev/null; }
# wait_zombies PIDFILE...: until the process of each file is a zombie (at most 100 s each).
wait_zombies() {
    local f
    for f in "$@"; do
        for _ in $(seq 2000); do zombie "$(cat "$f")" && break; sleep 0.05; done
    done
}
