"""test_plan_shared_flags.py: every option that `cohort estimate` and `cohort train` share (the
table in cli/cli_config.c) fed to both commands: a bad value and an out-of-range value give the
same message and exit 2 in both; a good value is read the same way by both (the resolved
configuration in `estimate --json` and `train --dry-run --json` agree), or `train` refuses it,
exit 2, naming what its trainer lacks while `estimate` prices it. A shared option without a case
here fails the test, so a new flag cannot skip the check."""
import json
import os
import re
import subprocess
import sys

COHORT = os.environ["COHORT"]
SRC = os.environ["COHORT_SOURCE_DIR"]
BASE = ["--layers", "4", "--heads", "4", "--dim", "64", "--vocab", "256", "--seq", "64",
        "--micro-batch", "2"]
# the launcher's variables would make `train` a rank of a job
ENV = {k: v for k, v in os.environ.items()
       if not k.startswith(("WORLD_SIZE", "RANK", "LOCAL_", "OMPI_", "PMI_", "SLURM_", "COHORT_RUN"))}

failures = 0


def fail(msg):
    global failures
    failures += 1
    print("FAIL", msg)


def run(cmd, args):
    extra = ["--json"] if cmd == "estimate" else ["--dry-run", "--json"]
    p = subprocess.run([COHORT, cmd, *BASE, *args, *extra], capture_output=True, text=True,
                       env=ENV)
    err = re.sub(r"^cohort (train|estimate): error: ", "", p.stderr.strip())
    return p.returncode, p.stdout, err


def same_refusal(flag, args, needle=None):
    """Both commands exit 2 with the same message naming the flag's value (or `needle`)."""
    (rc_e, _, err_e), (rc_t, _, err_t) = run("estimate", args), run("train", args)
    value = args[-1]
    if rc_e != 2 or rc_t != 2 or err_e != err_t or (needle or f"'{value}'") not in err_e:
        fail(f"{flag} {value}: estimate rc {rc_e} '{err_e}', train rc {rc_t} '{err_t}'")
    else:
        print(f"ok   {flag} {value}: both exit 2: {err_e}")


# flag: (bad value, out-of-range value or None, good value, JSON field it sets or None,
#        the train refusal when cohort's trainer lacks the feature, else None)
NUM = "must be an integer from"
CASES = {
    "--model": ("gpt5", None, None, None, None),
    "--layers": ("x", "100001", "2", ("model", "layers"), None),
    "--heads": ("4x", "65537", "2", ("model", "heads"), None),
    "--dim": ("", "1048577", "32", ("model", "dim"), None),
    "--vocab": ("-1", "1073741825", "300", ("model", "vocab"), None),
    "--seq": ("1e3", "16777217", "32", ("strategy", "seq"), None),
    "--ffn": ("lots", "16777217", "256", None, None),
    "--dp": ("two", "1048577", "1", ("strategy", "dp"), None),
    "--tp": ("0", "65537", "2", ("strategy", "tp"), "tp 2 x pp 1 = 2 does not divide the 1 ranks"),
    "--pp": ("-2", "65537", "2", ("strategy", "pp"), "tp 1 x pp 2 = 2 does not divide the 1 ranks"),
    "--strategy": ("zero4", None, "single", ("strategy", "name"), None),
    "--zero": ("4", None, "0", ("strategy", "zero"), None),
    "--micro-batch": ("0", "1048577", "3", ("strategy", "micro_batch"), None),
    "--batch": ("0", "1048577", "3", ("strategy", "micro_batch"), None),
    "--grad-accum": ("1.5", "1048577", "2", ("strategy", "microbatches"), None),
    "--accum": ("1.5", "1048577", "2", ("strategy", "microbatches"), None),
    "--microbatches": ("1.5", "1048577", "2", ("strategy", "microbatches"), None),
    "--schedule": ("zigzag", None, "gpipe", ("strategy", "schedule"),
                   "--schedule gpipe is a pipeline schedule: it needs --pp 2 or more"),
    "--virtual-stages": ("v", "1025", "1", ("strategy", "virtual_stages"), None),
    "--precision": ("fp8", None, "fp16-mixed", ("strategy", "precision"),
                    "--precision fp16-mixed: cohort's trainer runs fp32 or bf16-mixed"),
    "--recompute": ("some", None, "selective", ("strategy", "recompute"),
                    "--recompute selective: cohort's trainer recomputes whole blocks"),
    "--sequence-parallel": (None, None, "", ("strategy", "sequence_parallel"),
                            "--sequence-parallel: needs tensor parallelism"),
    "--dropout": (None, None, "", ("strategy", "dropout"), "--dropout: cohort's GPT has no dropout"),
    "--no-dropout": (None, None, "", ("strategy", "dropout"), None),
    "--offload": ("disk", None, "none", ("strategy", "offload"), None),
    "--bucket-mb": ("0", "1048577", "1.5", ("strategy", "bucket_bytes"), None),
    "--grad-reduce-dtype": ("fp16", None, "bf16", ("strategy", "grad_reduce_dtype"), None),
    "--grad-sync": ("sometimes", None, "after-backward", ("strategy", "grad_sync"),
                    "--grad-sync after-backward: cohort's trainer reduces each gradient bucket"),
    "--nodes": ("x", "65537", ["1", "--gpus-per-node", "1"], ("strategy", "nodes"), None),
    "--gpus-per-node": ("x", "65537", "1", ("strategy", "gpus_per_node"), None),
    "--threads": ("x", "4097", "2", None, None),
}

# every shared option of cli/cli_config.c has a case
shared = re.findall(r'^\s*\{"([a-z-]+)", [01], 0, C_', open(f"{SRC}/cli/cli_config.c").read(), re.M)
missing = sorted(set("--" + s for s in shared) - set(CASES))
if not shared or missing:
    fail(f"shared options without a case: {missing or 'none found in cli_config.c'}")

for flag, (bad, big, good, field, refusal) in CASES.items():
    if bad is not None:
        same_refusal(flag, [flag, bad])
    if big is not None:
        same_refusal(flag, [flag, big])
    if good is None:
        continue
    args = [flag] + (good if isinstance(good, list) else [good] if good != "" else [])
    (rc_e, out_e, err_e), (rc_t, out_t, err_t) = run("estimate", args), run("train", args)
    if rc_e != 0:
        fail(f"{flag} {good}: estimate refused it: {err_e}")
        continue
    if refusal:
        if rc_t != 2 or refusal not in err_t:
            fail(f"{flag} {good}: train should refuse with '{refusal}', got rc {rc_t} '{err_t}'")
        else:
            print(f"ok   {flag} {good}: estimate prices it, train refuses: {err_t}")
        continue
    if rc_t != 0:
        fail(f"{flag} {good}: train refused it: {err_t}")
        continue
    if field:
        e, t = json.loads(out_e)[field[0]][field[1]], json.loads(out_t)[field[0]][field[1]]
        if e != t:
            fail(f"{flag} {good}: estimate reads {field[1]} = {e}, train {t}")
            continue
    print(f"ok   {flag} {good}: both read it the same way")

# the spellings of one count must agree when given together, in both commands
same_refusal("--accum/--microbatches", ["--accum", "2", "--microbatches", "4"],
             "--accum 2 and --microbatches 4 disagree")
same_refusal("--strategy/--zero", ["--strategy", "zero1", "--zero", "2"],
             "--strategy zero1 and --zero 2 disagree")
same_refusal("--nodes alone", ["--nodes", "2"], "--nodes 2 needs --gpus-per-node")
# a check the estimator makes is the trainer's too, word for word
(rc_e, _, e1), (rc_t, _, e2) = run("estimate", ["--offload", "optimizer"]), \
    run("train", ["--offload", "optimizer"])
if not (rc_e == rc_t == 2 and e1 == e2 and "needs ZeRO" in e1):
    fail(f"--offload optimizer without ZeRO: estimate rc {rc_e} '{e1}', train rc {rc_t} '{e2}'")
# after-backward sync has no meaning for ZeRO-2/3 (they reduce-scatter every micro-batch)
rc_e, _, e1 = run("estimate", ["--zero", "2", "--dp", "2", "--grad-sync", "after-backward"])
if not (rc_e == 2 and "after backward with ZeRO stage 2" in e1):
    fail(f"--grad-sync after-backward with zero2: estimate rc {rc_e} '{e1}'")
else:
    print(f"ok   --grad-sync after-backward with zero2: estimate refuses: {e1}")
(rc_e, _, e1), (rc_t, _, e2) = run("estimate", ["--tp", "3"]), run("train", ["--tp", "3"])
if not (rc_e == rc_t == 2 and e1 == e2 and "does not divide the 4 attention heads" in e1):
    fail(f"--tp 3: estimate rc {rc_e} '{e1}', train rc {rc_t} '{e2}'")
else:
    print(f"ok   --tp 3: both refuse: {e1}")

print(f"{len(CASES)} shared options checked, {failures} failure(s)")
sys.exit(1 if failures else 0)
