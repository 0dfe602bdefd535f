"""test_docs_examples.py: every shell example of README.md and docs/*.md, run as a new user would.

An example is a command line in a ```-fenced block (backslash continuations joined; a `$ `
prompt stripped) that starts as a command does (`cohort`, `build/release/`, `scripts/`, `mpirun`,
`srun`, `cmake`, `export`, `VAR=value cmd`, ...); a block with `for`/`done` is one example, run
as a whole. Lines such as `cohort train: error: ...` or `cohort: mesh ...` are the output of the
example before them, not examples. Each example is:

1. checked flag by flag: every option it gives a cohort command (`cohort run ... cohort train
   --x`, `mpirun -np 2 cohort bench comm --y`) must appear in that command's `--help`;
2. rewritten by the substitution table SUBS below (paths -> this build and a tiny byte shard
   prepared here, step counts -> 2, model sizes -> at most 4 layers of dim 32, optional
   [--parts] left out, placeholders -> values; a `cohort train` that trains gets data, steps
   and each model size it leaves to the default from TINY_MODEL; mpirun as root gets
   --allow-run-as-root --oversubscribe)
   and run in a scratch folder with this build's folder first on PATH (a bare `cohort` as the
   docs write it), each doc's examples in order in one folder (so `bench gemm --out cal.json`
   feeds the `--calibration cal.json` after it). An example shown with an error line after it
   must exit non-zero, every other one 0.

Examples that cannot run here are listed in EXCLUDED (doc, a stable snippet, the reason: a GPU,
a cluster, minutes of measurement, a synopsis with placeholders); their flags are still
checked. FIXED_ELSEWHERE lists those that fail today for a reason another branch fixes. An entry
of either list that matches no example fails the test, so neither list can rot.
"""
import os
import re
import shlex
import subprocess
import sys
import tempfile
import time

SRC = os.environ.get("COHORT_SOURCE_DIR") or os.path.dirname(os.path.dirname(os.path.dirname(
    os.path.abspath(__file__))))
COHORT = os.environ.get("COHORT") or os.path.join(os.getcwd(), "cohort")
BUILD = os.path.dirname(os.path.abspath(COHORT))
TIMEOUT = 150

# (doc, snippet, reason): the examples of doc whose text contains snippet are not run.
EXCLUDED = [
    ("README.md", "scripts/main-job.sh", "the whole main job: installs packages, minutes"),
    ("README.md", "scripts/test.sh", "the whole test suite (this test is part of it)"),
    ("launcher.md", "--node-rank K --job-token job.token", "two nodes (test_launch_strangers.sh runs it across namespaces)"),
    ("README.md", "cmake --install build/release", "installs into the home folder; test_comm_mpi_path.sh installs into a temporary prefix and runs cohort from there"),
    ("BENCHMARKS.md", "", "benchmark reproductions: minutes of measurement each, under a lock"),
    ("cluster.md", "srun", "a Slurm cluster"),
    ("cluster.md", "-hosts node0,node1", "two hosts"),
    ("cluster.md", "--host node0:4,node1:4", "two hosts"),
    ("cluster.md", "--calibration cal.json --nodes 4", "needs cal.json from the srun bench above"),
    ("comm.md", "build/test-tsan", "a second, ThreadSanitizer build (minutes)"),
    ("data.md", "--out PREFIX [--tokenizer", "synopsis"),
    ("devices.md", "python train.py", "a user's training script on GPUs"),
    ("devices.md", "--inventory four.json --accelerator gpu --devices 0",
     "an inventory file the reader writes (four.json)"),
    ("estimate.md", "--config path/to/config.json", "a Hugging Face config.json of the reader's"),
    ("launcher.md", "cohort run [options]", "synopsis"),
    ("launcher.md", "-n gpu python3 train.py", "a GPU"),
    ("launcher.md", "--devices 0,3 --bind-devices", "4 GPUs"),
    ("launcher.md", "--pick 2 python3 train.py", "2 free GPUs"),
    ("launcher.md", "--nnodes 2 --node-rank 0", "two nodes"),
    ("launcher.md", "--nnodes 2 --node-rank 1", "two nodes"),
    ("parallel.md", "--tp 2 --data ... --layers 8", "shown as a shape, without data or steps"),
    ("parallel.md", "--tp 2 --pp 2 --schedule 1f1b", "8 ranks: shown as a shape"),
    ("pipeline.md", "pipe_draw SCHEDULE", "synopsis"),
    ("plan.md", "--inventory a100x8.json --nodes 4", "an inventory file of the reader's"),
    ("plan.md", "bench gemm --out cal.json [--link", "synopsis"),
    ("plan.md", "cohort plan ... --calibration cal.json", "synopsis (the model left out)"),
    ("plan.md", "bench gemm --device cuda --out h100.json", "a GPU"),
    ("plan.md", "cohort plan ... --calibration h100.json", "synopsis (the model left out)"),
    ("plan.md", "--host node0,node1", "two hosts"),
    ("plan.md", "--calibration cal.json --nodes 2", "synopsis over two nodes"),
    ("plan.md", "--micro-batch 4 --grad-accum 2 --measure", "--measure trains every leader: minutes"),
    ("cluster.md", "--nnodes 2 --node-rank 0", "two nodes"),
    ("cluster.md", "--nnodes 2 --node-rank 1", "two nodes"),
    ("report.md", "cohort report [options]", "synopsis"),
]

# Examples that fail here today for what another branch fixes; drop each once it is merged.
FIXED_ELSEWHERE = []

# 4 layers: the smallest model every documented pipeline split (pp 2 x 2 chunks) can hold
TINY_MODEL = ["--layers", "4", "--heads", "2", "--dim", "32", "--seq", "32", "--vocab", "256"]

# (pattern, replacement) applied in order to each example's text before it runs.
SUBS = [
    (r"\$PWD/build/release", BUILD),
    (r"(?<![\w/])build/release\b", BUILD),
    (r"\s*\[--[^\]]*\]", ""),  # an optional part in [brackets]: left out
    (r"\bSHARDS\b", "'{data}'"),
    (r"^mpirun ", "mpirun --allow-run-as-root --oversubscribe " if os.geteuid() == 0 else
     "mpirun --oversubscribe "),
    (r"'shards/train_\*\.bin'|'build/main-job/fortunes_train_\*\.bin'|"
     r"shards/byte_train_000000\.bin", "'{data}'"),
    (r"--steps \d+", "--steps 2"),
    (r"--save-every \d+", "--save-every 1"),
    (r"--layers (\d+)", lambda m: "--layers %d" % min(int(m.group(1)), 4)),
    (r"--dim \d+", "--dim 32"),
    (r"--heads \d+", "--heads 2"),
    (r"--seq \d+", "--seq 32"),
    (r"--vocab 50257", "--vocab 256"),
    (r"\$MODEL", " ".join(TINY_MODEL)),
    (r"\$DATA", "--data '{data}' --steps 2"),
    (r"--inventory four\.json", "--inventory " + os.path.join(SRC, "tests/device/inventories/four_a100.json")),
    (r"--inventory gaudi\.json", "--inventory " + os.path.join(SRC, "tests/device/inventories/gaudi.json")),
    (r"(?<![\w/])src/train/", lambda m: os.path.join(SRC, "src/train/")),  # run from the repository root
]


def docs():
    out = [os.path.join(SRC, "README.md")]
    d = os.path.join(SRC, "docs")
    out += [os.path.join(d, f) for f in sorted(os.listdir(d)) if f.endswith(".md")]
    return out


COMMAND = re.compile(r"^(cohort\b|build/|\./build/|scripts/|bench/|mpirun\b|mpiexec\S*|srun\b|"
                     r"sbatch\b|cmake\b|export\b|env\b|torchrun\b|taskset\b|python3?\b|"
                     r"[A-Z_][A-Z0-9_]*=\S*\s+\S|[A-Z_][A-Z0-9_]*=\()")
OUTPUT = re.compile(r"^cohort[\w -]*:")  # "cohort train: error: ...", "cohort: mesh ..."


def examples(path):
    """(doc, text, expect_failure) for each example of the file."""
    doc = os.path.basename(path)
    lines = open(path, encoding="utf-8").read().split("\n")
    out, block, inblock = [], [], False
    for line in lines:
        if line.lstrip().startswith("```"):
            if inblock:
                out += block_examples(doc, block)
            inblock, block = not inblock, []
        elif inblock:
            block.append(line)
    return out


def block_examples(doc, block):
    if any(re.match(r"\s*(for|while)\b.*", l) for l in block) and \
            any(l.strip() == "done" for l in block):
        return [(doc, "\n".join(block), False)]
    out, i = [], 0
    while i < len(block):
        s = block[i].strip()
        p = re.match(r"^[\w.-]*\$ ", s)  # "$ cohort ...", "node0$ cohort ..."
        prompt = bool(p)
        s = s[p.end():] if p else s
        if not COMMAND.match(s) or OUTPUT.match(s):
            i += 1
            continue
        while s.endswith("\\") and i + 1 < len(block):
            i += 1
            s = s[:-1].rstrip() + " " + block[i].strip()
        after = block[i + 1].strip() if i + 1 < len(block) else ""
        out.append((doc, s, after if prompt and ": error:" in after else None))
        i += 1
    return out


HELP = {}


def help_of(sub):
    if sub not in HELP:
        r = subprocess.run([COHORT] + sub.split() + ["--help"], capture_output=True, text=True)
        HELP[sub] = r.stdout + r.stderr
    return HELP[sub]


def value_options(help_text):
    """Options of a help text that take a value ('--pick N'), so the program after them is found."""
    opts = set()
    for m in re.finditer(r"(?m)^\s+(?:(-\w),\s+)?(--[\w-]+)[ =]([A-Z][\w|.]*|[a-z]+(?:\|[\w-]+)+)",
                         help_text):
        opts.update(o for o in m.group(1, 2) if o)
    return opts


def words(text):
    text = text.split(" #")[0]
    try:
        return shlex.split(text, comments=False)
    except ValueError:
        return text.split()


def check_flags(text):
    """The flags given to each cohort command that its --help does not name."""
    bad, w = [], words(text)
    for i, word in enumerate(w):
        if os.path.basename(word) != "cohort" or i + 1 >= len(w) or w[i + 1].startswith("-"):
            continue
        sub = w[i + 1]
        j = i + 2
        if sub == "bench" and j < len(w) and not w[j].startswith("-"):
            sub, j = sub + " " + w[j], j + 1
        text_help = help_of(sub)
        takes = value_options(text_help)
        while j < len(w) and os.path.basename(w[j]) != "cohort":
            a = w[j]
            if a == "--" or (sub in ("run", "pick") and not a.startswith("-") and
                             not (w[j - 1] in takes) and not (sub == "pick" and a.isdigit())):
                break
            if a.startswith("-") and a != "-" and re.match(r"^--?[a-zA-Z]", a):
                flag = a.split("=")[0]
                pat = r"(^|[\s,\[(|])" + re.escape(flag) + r"($|[\s=,\]|)])"
                if not re.search(pat, text_help, re.M):
                    bad.append("cohort %s: %s" % (sub, flag))
            j += 1
    return bad


def rewrite(text, data):
    for pat, rep in SUBS:
        text = re.sub(pat, rep, text) if callable(rep) else re.sub(pat, rep.replace("\\", "\\\\"), text)
    text = text.replace("{data}", data)
    w = words(text)
    for k, word in enumerate(w):  # a cohort train that trains: a tiny model, data and steps
        if os.path.basename(word) == "cohort" and k + 1 < len(w) and w[k + 1] == "train" and \
                "--dry-run" not in w:
            extra = ""
            if "--data" not in w:
                extra += " --data '%s'" % data
            if "--steps" not in w:
                extra += " --steps 2"
            if "--model" in w:
                text = re.sub(r"--model \S+", "", text)
            for flag, value in zip(TINY_MODEL[0::2], TINY_MODEL[1::2]):
                if flag not in w:  # each size the example leaves to the default: tiny
                    extra += " %s %s" % (flag, value)
            text = text.replace(" ...", "") + extra
            break
    return text


def matches(entry, doc, text):
    return entry[0] == doc and entry[1] in text


def run(doc, text, expect_fail, work, env):
    if text.startswith("mpirun"):
        # Open MPI does not free its own allocations at MPI_Finalize: under AddressSanitizer an
        # mpirun example would fail on Open MPI's leaks, not cohort's (as test_pipeline_mpi.sh)
        asan = env.get("ASAN_OPTIONS", "")
        env = dict(env, ASAN_OPTIONS=(asan + ":" if asan else "") + "detect_leaks=0")
    try:
        r = subprocess.run(["bash", "-c", text], cwd=work, env=env, capture_output=True,
                           text=True, timeout=TIMEOUT)
    except subprocess.TimeoutExpired:
        return "timed out after %d s" % TIMEOUT
    said = (r.stdout + r.stderr).replace("\n", " ")
    if expect_fail and r.returncode == 0:
        return "the doc shows an error after it, but it exited 0"
    if expect_fail and expect_fail.split("...")[0].strip() not in said:
        return "the doc shows '%s', it printed: %s" % (expect_fail, said[-300:])
    if not expect_fail and r.returncode != 0:
        tail = (r.stdout + r.stderr).strip().split("\n")[-4:]
        return "exit %d: %s" % (r.returncode, " | ".join(tail))
    return None


def prepare(tmp):
    """A tiny byte shard from the docs themselves."""
    corpus = os.path.join(tmp, "corpus.txt")
    with open(corpus, "w") as f:
        for p in docs():
            f.write(open(p, encoding="utf-8").read())
    prefix = os.path.join(tmp, "tiny")
    subprocess.run([COHORT, "prepare", "--tokenizer", "byte", "--out", prefix, corpus],
                   check=True, capture_output=True)
    with open(os.path.join(tmp, "train.py"), "w") as f:  # launcher.md's `python3 train.py`
        f.write("import os\nprint('rank', os.environ['RANK'], 'of', os.environ['WORLD_SIZE'])\n")
    return prefix + "_train_*.bin"


def main():
    all_ex = [e for p in docs() for e in examples(p)]
    failures, used, ran = [], set(), 0
    listed = [(e, "excluded") for e in EXCLUDED] + [(e, "fixed elsewhere") for e in FIXED_ELSEWHERE]
    with tempfile.TemporaryDirectory() as tmp:
        data = prepare(tmp)
        env = dict(os.environ, PATH=BUILD + os.pathsep + os.environ.get("PATH", ""),
                   OMP_NUM_THREADS="1")
        for doc, text, expect_fail in all_ex:
            for bad in check_flags(text):
                failures.append("%s: '%s': no such option in --help: %s" % (doc, text[:90], bad))
            hit = [(e, why) for e, why in listed if matches(e, doc, text)]
            for e, _ in hit:
                used.add(e)
            if hit:
                print("not run  %-13s %-70s (%s: %s)" % (doc, text[:70].replace("\n", "; "),
                                                         hit[0][1], hit[0][0][2]))
                continue
            work = os.path.join(tmp, doc)
            os.makedirs(work, exist_ok=True)
            if not os.path.exists(os.path.join(work, "train.py")):
                os.symlink(os.path.join(tmp, "train.py"), os.path.join(work, "train.py"))
            cmd = rewrite(text, data)
            t0 = time.time()
            why = run(doc, cmd, expect_fail, work, env)
            ran += 1
            print("%s %5.1fs %-13s %s" % ("FAIL" if why else "ok  ", time.time() - t0, doc,
                                          cmd[:150].replace("\n", "; ")))
            if why:
                failures.append("%s: '%s' (run as '%s'): %s" % (doc, text[:100], cmd[:200], why))
    for e, what in listed:
        if e not in used:
            failures.append("the %s entry %r matches no example any more: drop or update it"
                            % (what, e[:2]))
    print("%d examples, %d run, %d listed as not run" % (len(all_ex), ran, len(all_ex) - ran))
    for f in failures:
        print("FAIL " + f)
    return 1 if failures else 0


if __name__ == "__main__":
    sys.exit(main())
