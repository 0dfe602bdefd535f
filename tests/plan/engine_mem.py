"""engine_mem.py: one run of engine_lib.sh's engine_run against its estimate (imported by the
tests/plan/test_plan_engine_*.sh checks, not a test itself): each rank's model state at the
optimizer step (resident parameter and gradient pages, AdamW moments) and peak resident growth
(peak RSS minus the RSS just before the model was created) beside the prediction."""
import json

HEADER = "%14s %14s %7s %14s %14s %7s" % ("state pred", "state meas", "err", "growth pred",
                                          "growth meas", "err")


def ranks(work, name, n, rss):
    """(estimate, [(rank, held, grown, state error, growth error, the row's figures as text,
    problems)]) of run NAME on n ranks; problems: the trainer's own prediction not the
    estimator's."""
    est = json.load(open("%s/%s.est" % (work, name)))
    pd = est["per_device"]
    mem = json.loads(open("%s/%s.jsonl" % (work, name)).read().splitlines()[-1])["memory"]
    rows = []
    if len(mem) != n:
        return est, None
    for m in mem:
        held = m["params_bytes"] + m["grads_bytes"] + m["optim_bytes"]
        grown = m["peak_rss_bytes"] - m["base_rss_bytes"]
        e1 = (held - pd["model_state_bytes"]) / pd["model_state_bytes"]
        e2 = (grown - pd["total_bytes"]) / pd["total_bytes"]
        text = "%14d %14d %+6.2f%% %14d %14d %s" % (
            pd["model_state_bytes"], held, 100 * e1, pd["total_bytes"], grown,
            "%+6.2f%%" % (100 * e2) if rss else "(not compared under ASan)")
        problems = []
        if abs(m["predicted_bytes"] - pd["total_bytes"]) > 0.01 * pd["total_bytes"]:
            problems.append("trainer predicted %d, estimate %d" % (m["predicted_bytes"],
                                                                    pd["total_bytes"]))
        rows.append((m["rank"], held, grown, e1, e2, text, problems))
    return est, rows
