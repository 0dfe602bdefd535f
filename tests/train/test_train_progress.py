"""test_train_progress.py: `cohort train`'s progress on a terminal (a pseudo-terminal here): one
line redrawn in place with step/total, loss, tokens/s, MFU, elapsed and ETA, in colour unless
NO_COLOR is set; plain log lines with TERM=dumb and off a terminal (their format unchanged); and
the same line through `cohort run`, whose launcher passes it on from rank 0."""
import atexit
import fcntl
import os
import pty
import re
import shutil
import struct
import subprocess
import sys
import tempfile
import termios

COHORT = os.environ["COHORT"]
SRC = os.environ["COHORT_SOURCE_DIR"]
fails = []

BAR = re.compile(r"^(\[rank0\]: )?\[(?:\x1b\[32m)?#*(?:\x1b\[0m)? *\] step (\d+)/20 \| loss (\d+\.\d{4})"
                 r"(?: \| val (\d+\.\d{4}))? \| (\d+) tok/s \| mfu (\d+\.\d%|n/a) \| "
                 r"elapsed (\d+)m(\d\d)s \| eta (\d+)m(\d\d)s\x1b\[K$")
PLAIN = re.compile(r"^(\[rank0\]: )?step (\d+)/20 loss \d+\.\d{4}(?: \| val \d+\.\d{4})? lr \S+ "
                   r"tokens_per_s \d+ mfu (?:\d+\.\d%|n/a) elapsed \d+\.\ds$")


def check(cond, what):
    if not cond:
        fails.append(what)
        print("FAIL:", what)


def run_pty(cmd, env, cols=0):
    """Run cmd with stdout and stderr on a new pseudo-terminal (of cols columns; 0: no size);
    all it wrote, as text."""
    master, slave = pty.openpty()
    if cols:
        fcntl.ioctl(slave, termios.TIOCSWINSZ, struct.pack("HHHH", 24, cols, 0, 0))
    p = subprocess.Popen(cmd, stdin=subprocess.DEVNULL, stdout=slave, stderr=slave, env=env)
    os.close(slave)
    out = b""
    while True:
        try:
            chunk = os.read(master, 65536)
        except OSError:  # EIO: every writer closed the terminal
            break
        if not chunk:
            break
        out += chunk
    os.close(master)
    rc = p.wait(timeout=120)
    return rc, out.decode("utf-8", "replace").replace("\r\n", "\n")  # the tty's ONLCR


def bars(text):
    """The progress segments: pieces ended by '\\r' or '\\n' that look like the bar."""
    segs = re.split(r"[\r\n]", text)
    return [m for m in (BAR.match(s) for s in segs) if m]


def check_bar(name, text, color, launcher=False):
    got = bars(text)
    steps = [int(m.group(2)) for m in got]
    check(steps == list(range(1, 21)), f"{name}: bar steps {steps}, expected 1..20 once each")
    if not got:
        return
    last = got[-1]
    check(last.group(9) == "0" and last.group(10) == "00", f"{name}: last ETA not 0m00s")
    check(all(m.group(5) != "0" for m in got), f"{name}: a bar with 0 tok/s")
    check([int(m.group(2)) for m in got if m.group(4)] == [10, 20],
          f"{name}: validation shown at steps {[m.group(2) for m in got if m.group(4)]}")
    # redrawn in place: ended by '\r', except the validated steps' and the last, kept by '\n'
    for step in (3, 10, 20):
        m = re.search(r"step %d/20 [^\r\n]*([\r\n])" % step, text)
        want = "\r" if step == 3 else "\n"
        check(m and m.group(1) == want, f"{name}: step {step}'s bar not ended by {want!r}")
    check(("\x1b[32m" in text) == color, f"{name}: colour {'missing' if color else 'present'}")
    check(all(bool(m.group(1)) == launcher for m in got), f"{name}: rank prefix")
    check(not any(PLAIN.match(s) for s in text.split("\n")), f"{name}: plain log lines on a tty")


def main():
    work = tempfile.mkdtemp()
    atexit.register(shutil.rmtree, work, ignore_errors=True)
    corpus = os.path.join(work, "corpus.txt")
    with open(corpus, "w") as f:
        for name in ("README.md", "docs/train.md", "docs/parallel.md"):
            f.write(open(os.path.join(SRC, name)).read())
    subprocess.run([COHORT, "prepare", "--tokenizer", "byte", "--val-fraction", "0.1", "--documents", "paragraph",
                    "--out", os.path.join(work, "c"), corpus], check=True,
                   stdout=subprocess.DEVNULL)
    train = [COHORT, "train", "--tokenizer", "byte", "--vocab", "256", "--layers", "1",
             "--heads", "2", "--dim", "32", "--seq", "32", "--batch", "4", "--threads", "1",
             "--steps", "20", "--log-every", "5", "--val-every", "10", "--val-batches", "2",
             "--data", os.path.join(work, "c_train_*.bin"),
             "--val-data", os.path.join(work, "c_val_*.bin")]
    base = {k: v for k, v in os.environ.items()
            if k not in ("NO_COLOR", "TERM", "COHORT_STDERR_TTY")}

    rc, text = run_pty(train, dict(base, TERM="xterm"))
    check(rc == 0, f"tty run exited {rc}: {text[-500:]}")
    check_bar("tty", text, color=True)

    rc, text = run_pty(train, dict(base, TERM="xterm", NO_COLOR="1"))
    check(rc == 0, f"NO_COLOR run exited {rc}")
    check_bar("NO_COLOR", text, color=False)
    check("\x1b[3" not in text and "\x1b[0m" not in text, "NO_COLOR: a colour was written")

    for name, env in (("TERM=dumb", dict(base, TERM="dumb")),):
        rc, text = run_pty(train, env)
        check(rc == 0, f"{name} run exited {rc}")
        check("\r" not in text and "\x1b[" not in text, f"{name}: bar drawn: {text[-300:]!r}")
        steps = [int(m.group(2)) for m in map(PLAIN.match, text.split("\n")) if m]
        check(steps == [5, 10, 15, 20], f"{name}: plain lines at steps {steps}")

    # Off a terminal: stdout has the plain lines, exactly as before, stderr no bar.
    p = subprocess.run(train, env=dict(base, TERM="xterm"), capture_output=True, text=True)
    check(p.returncode == 0, f"piped run exited {p.returncode}")
    lines = [l for l in p.stdout.split("\n") if l.startswith("step ")]
    check(len(lines) == 4 and all(PLAIN.match(l) for l in lines),
          f"piped: plain lines {lines}")
    check("\r" not in p.stderr and "tok/s |" not in p.stderr, "piped: a bar on stderr")

    # Through the launcher: rank 0's bar, prefixed, passed on as it is redrawn.
    launch = [COHORT, "run", "--nproc-per-node", "2"] + train + ["--strategy", "ddp"]
    rc, text = run_pty(launch, dict(base, TERM="xterm"))
    check(rc == 0, f"launcher tty run exited {rc}: {text[-500:]}")
    check_bar("cohort run, tty", text, color=True, launcher=True)
    check("[rank1]: [" not in text, "cohort run: rank 1 drew a bar")

    # The terminal's width: the line fits it, prefix included (the launcher tells the worker the
    # columns left after its prefix); too narrow for a bar, the bar is left out.
    visible = lambda seg: re.sub(r"\x1b\[[0-9;]*[mK]", "", seg)
    for name, cmd, cols in (("tty, 100 columns", train, 100),
                            ("cohort run, 100 columns", launch, 100)):
        rc, text = run_pty(cmd, dict(base, TERM="xterm"), cols)
        segs = [visible(g) for g in re.split(r"[\r\n]", text) if "tok/s |" in g]
        check(rc == 0 and len(segs) == 20, f"{name}: {len(segs)} progress segments")
        check(all(len(g) <= cols for g in segs),
              f"{name}: lines wider than {cols}: {[g for g in segs if len(g) > cols][:2]}")
        check(all("] step" in g for g in segs if "| val" not in g), f"{name}: no bar")
    # 50 columns: narrower than any progress line (its shortest, compact form with one-digit
    # speed and "mfu n/a", is 56 characters), whatever speed and MFU this build reaches; 70 was
    # chosen once, and a slower build's shorter figures (4-digit tok/s, mfu 1.5%) fit a bar in it
    rc, text = run_pty(train, dict(base, TERM="xterm"), 50)
    segs = [visible(g) for g in re.split(r"[\r\n]", text) if "tok/s |" in g]
    check(len(segs) == 20 and all(g.startswith("step ") for g in segs),
          f"50 columns: a bar drawn where it does not fit: {segs[:1]}")
    # piped, the launcher drops an inherited COHORT_STDERR_TTY: plain lines
    p = subprocess.run(launch, env=dict(base, TERM="xterm", COHORT_STDERR_TTY="1"),
                       capture_output=True, text=True)
    check(p.returncode == 0, f"launcher piped run exited {p.returncode}")
    steps = [int(m.group(2)) for m in map(PLAIN.match, p.stdout.split("\n")) if m]
    check(steps == [5, 10, 15, 20], f"cohort run, piped: plain lines at steps {steps}")
    check("\r" not in p.stdout + p.stderr, "cohort run, piped: a bar")

    subprocess.run(["rm", "-rf", work])
    print(f"{len(fails)} failure(s)" if fails else "ok")
    return 1 if fails else 0


if __name__ == "__main__":
    sys.exit(main())
