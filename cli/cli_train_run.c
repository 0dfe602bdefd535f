/* cli_train_run.c: the `cohort train` loop: loaders, steps (through the parallel trainer: single
 * is the mesh (1, 1, 1)), validation, metrics, progress, checkpoints, and the closing memory and
 * speed summary. Only rank 0 writes metrics, progress and checkpoints. */
#include <math.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/ioctl.h>
#include <time.h>
#include <unistd.h>

#include "cli.h"
#include "cli_train.h"
#include "cohort/backend.h"
#include "cli_train_par.h"
#include "cohort/clock.h"
#include "cohort/json_writer.h"
#include "cohort/launch.h"
#include "cohort/log.h"
#include "cohort/size.h"
#include "cohort/train_ckpt.h"

static const char *const CMD = "train";

typedef struct run {
    const train_opts *o;
    coh_par_trainer *pt;
    coh_trainer *t; /* the base trainer of pt */
    cli_par par;
    uint64_t *mem;  /* (4 * world) per-rank memory for the metrics */
    const char *resume; /* --resume, or --save after a restart by the launcher */
    coh_loader *train, *val;
    FILE *metrics;
    double peak_flops, flops_per_token, t_start;
    double tps_avg; /* the progress line's smoothed tokens/s */
    int tty, threads; /* tty: progress_kind() */
    int mfu_warned;   /* the warning that MFU reads above 100% was given */
    long first_step, last_step;
} run;

/* SIGINT (Ctrl-C), on every rank: rank 0 writes one line saying where the run was and which
 * step its checkpoint holds (the others' line is empty), then the rank dies of the signal (exit
 * status 130). A signal that comes during a save waits for its end on every rank (a launcher
 * forwards it to all of them, and a rank that died mid-save would leave its shard half-written
 * and the step uncommitted); the ranks then agree to stop (stop_together). A second signal ends
 * the rank at once, removing the state and commit files' temporaries (named after this
 * process, never a committed file). The line is made outside the handler (snprintf is not
 * async-signal-safe), in one buffer while the handler may read the other. */
static char interrupt_line[2][600];
static volatile sig_atomic_t interrupt_cur;
static char saving_tmp[3][4300];
static volatile sig_atomic_t saving, pending, said;

/* The interrupt line, once. */
static void say_interrupted(void)
{
    const char *line = interrupt_line[interrupt_cur];
    size_t n = 0;
    while (line[n])
        n++;
    if (!said && write(STDERR_FILENO, line, n) < 0) {
        /* nothing to do: the run ends either way */
    }
    said = 1;
}

static void die_of(int sig)
{
    say_interrupted();
    for (int i = 0; saving && i < 3; i++)
        unlink(saving_tmp[i]);
    signal(sig, SIG_DFL);
    raise(sig);
}

static void on_interrupt(int sig)
{
    if (saving && !pending) {
        pending = sig;
        return;
    }
    die_of(sig);
}

/* The interrupt line after `step`, with the last checkpoint saved (-1: none yet), while the
 * save of `step` is under way when `during` (its commit may or may not have happened). */
static void set_interrupt_line(const train_opts *o, long step, long saved, int during)
{
    int next = !interrupt_cur;
    char *b = interrupt_line[next];
    size_t cap = sizeof interrupt_line[next];
    int n = snprintf(b, cap, "%s %s: interrupted (SIGINT) after step %ld; ", cli_progname, CMD,
                     step);
    if (n > 0 && (size_t)n < cap) {
        if (!o->save)
            snprintf(b + n, cap - (size_t)n, "nothing saved (no --save)\n");
        else if (during && saved < 0)
            snprintf(b + n, cap - (size_t)n, "its save was under way: '%s' holds step %ld if "
                     "that save committed, else no checkpoint\n", o->save, step);
        else if (during)
            snprintf(b + n, cap - (size_t)n, "its save was under way: '%s' holds step %ld if "
                     "that save committed, else step %ld\n", o->save, step, saved);
        else if (saved < 0)
            snprintf(b + n, cap - (size_t)n, "no checkpoint saved yet in '%s'\n", o->save);
        else
            snprintf(b + n, cap - (size_t)n, "last checkpoint: step %ld in '%s'\n", saved,
                     o->save);
    }
    interrupt_cur = next;
}

static coh_status next_batch(void *ctx, int32_t *in, int32_t *tg)
{
    return coh_loader_next(ctx, in, tg);
}

static coh_status open_loader(const run *r, const char *const *paths, int n, int eval,
                              coh_loader **out)
{
    const train_opts *o = r->o;
    /* dp: the training batch is every device's rows; evaluation runs on device 0 alone */
    int rows = o->tc.batch * (eval || o->devices < 1 ? 1 : (int)o->devices);
    coh_loader_config lc = {
        .paths = paths, .npaths = (size_t)n, .batch = rows, .seq = o->tc.seq,
        .rank = r->par.mesh->dp_rank, .world = r->par.mesh->dp, .shuffle = o->shuffle,
        .seed = o->tc.seed,
        .mode = eval ? COH_LOADER_EVAL : COH_LOADER_TRAIN, .vocab = o->tc.model.vocab,
    };
    return coh_loader_create(&lc, out);
}

static coh_status setup(run *r)
{
    const train_opts *o = r->o;
    coh_status st = cli_par_open(o, &r->par);
    coh_par_config pc = {.train = o->tc, .par = o->cfg.par,
                         .trace_path = r->par.trace_path[0] ? r->par.trace_path : NULL};
    if (!st) {
        r->par.base_rss = cli_rss_reset(); /* training's memory is what grows from here */
        st = coh_par_trainer_create(&pc, r->par.mesh, &r->pt);
    }
    if (!st && !(r->mem = calloc(CLI_MEM_N * (size_t)r->par.world_size, sizeof *r->mem)))
        st = coh_errf(COH_ERR_NOMEM, "out of memory");
    if (st)
        return st;
    r->t = coh_par_trainer_base(r->pt);
    if (o->init_from && !(st = coh_gpt_load(coh_trainer_model(r->t), o->init_from)))
        coh_par_trainer_params_loaded(r->pt);
    if (!st)
        st = open_loader(r, o->data, o->ndata, 0, &r->train);
    if (!st && o->nval)
        st = open_loader(r, o->val, o->nval, 1, &r->val);
    if (!st && r->resume) {
        coh_loader_pos pos;
        int threads = 0;
        st = coh_par_trainer_resume(r->pt, r->resume, &pos, &threads);
        if (!st && o->deterministic && threads && threads != r->threads)
            st = coh_errf(COH_ERR_MISMATCH, "checkpoint '%s' was trained with %d threads, this "
                          "run has %d: --deterministic needs the same (--threads %d)",
                          r->resume, threads, r->threads, threads);
        if (!st)
            st = coh_loader_seek(r->train, &pos);
    }
    return st;
}

static coh_status validate(run *r, double *loss)
{
    uint64_t avail = coh_loader_steps_per_epoch(r->val);
    long n = (long)(avail < (uint64_t)r->o->val_batches ? avail : (uint64_t)r->o->val_batches);
    coh_loader_rewind(r->val);
    return coh_par_trainer_eval(r->pt, next_batch, r->val, n, loss);
}

/* Tokens one step trains on, over all ranks and devices. */
static double step_tokens(const run *r)
{
    const train_opts *o = r->o;
    return (double)o->tc.batch * o->tc.seq * o->tc.accum * r->par.mesh->dp *
           (o->devices > 0 ? o->devices : 1);
}

static void write_metrics(run *r, const coh_step_stats *s, double tps, double mfu, double val)
{
    if (!r->metrics)
        return;
    coh_jw w;
    coh_jw_init(&w, r->metrics, 0);
    coh_jw_object_begin(&w);
    coh_jw_field_int(&w, "step", s->step);
    coh_jw_field_double(&w, "tokens", step_tokens(r) * (double)s->step); /* trained so far */
    coh_jw_field_double(&w, "loss", s->loss);
    coh_jw_field_double(&w, "lr", s->lr);
    coh_jw_field_double(&w, "tokens_per_s", tps);
    coh_jw_field_double(&w, "mfu", mfu > 0 && mfu <= 1 ? mfu : NAN); /* null: not a true MFU */
    coh_jw_field_double(&w, "elapsed_s", coh_now_s() - r->t_start);
    coh_jw_field_double(&w, "grad_norm", s->grad_norm);
    if (val >= 0) {
        coh_jw_field_double(&w, "val_loss", val);
    }
    static const char *const MEM[CLI_MEM_N] = {"params_bytes", "grads_bytes", "optim_bytes",
                                               "peak_rss_bytes", "base_rss_bytes",
                                               "predicted_bytes", "busy_us", "idle_us",
                                               "tp_comm_us", "alloc_peak_bytes"};
    /* per rank: model state at the optimizer step; peak resident size and the resident size
     * before the model existed (their difference is what training grew); the prediction of
     * that growth; the device allocator's peak (every buffer the rank took from it) */
    coh_jw_key(&w, "memory");
    coh_jw_array_begin(&w);
    for (int k = 0; k < r->par.world_size; k++) {
        coh_jw_object_begin(&w);
        coh_jw_field_int(&w, "rank", k);
        /* pipelines add each stage's compute and waiting (its bubble) in the last step,
         * tensor parallelism the step's time in its all-reduces */
        for (int i = 0; i < CLI_MEM_N; i++) {
            if ((i == CLI_MEM_BUSY_US || i == CLI_MEM_IDLE_US) && r->o->cfg.par.pp < 2)
                continue;
            if (i == CLI_MEM_TP_COMM_US && r->o->cfg.par.tp < 2)
                continue;
            coh_jw_field_uint(&w, MEM[i], r->mem[CLI_MEM_N * k + i]);
        }
        if (k == r->par.rank && coh_par_trainer_devices(r->pt) > 1)
            cli_par_write_devices(&w, r->pt); /* dp: its rank's figures are these summed */
        coh_jw_object_end(&w);
    }
    coh_jw_array_end(&w);
    coh_jw_object_end(&w);
    coh_jw_finish(&w);
    fflush(r->metrics);
}

/* Columns of the terminal on stderr (through the launcher: what it says is left after its line
 * prefix); 0 when unknown (a pty of no size). */
static int terminal_columns(void)
{
    struct winsize ws;
    const char *relayed = getenv("COHORT_STDERR_COLUMNS");
    if (ioctl(STDERR_FILENO, TIOCGWINSZ, &ws) == 0)
        return ws.ws_col;
    return relayed ? atoi(relayed) : 0;
}

static void show_progress(run *r, const coh_step_stats *s, double tps, double mfu, double val)
{
    long done = s->step - r->first_step, total = r->last_step - r->first_step;
    double el = coh_now_s() - r->t_start, eta = done ? el / done * (total - done) : 0;
    char vbuf[32] = "";
    if (val >= 0)
        snprintf(vbuf, sizeof vbuf, " | val %.4f", val);
    if (r->tty) {
        /* one line redrawn in place, ended by '\r' so that a launcher passes it on at once; a
         * validated step's and the last line stay. Speed smoothed as tqdm's (weight 0.3 on
         * the newest step); the bar fits the terminal's width when it is known. */
        r->tps_avg = r->tps_avg > 0 ? 0.7 * r->tps_avg + 0.3 * tps : tps;
        char text[256], mtext[16];
        coh_mfu_text(r->tps_avg / tps * mfu, mtext, sizeof mtext);
        int cols = terminal_columns(), width = 20;
        for (int compact = 0; compact < 2; compact++) { /* tqdm's "elapsed<eta" if narrow */
            snprintf(text, sizeof text, "step %ld/%ld | loss %.4f%s | %.0f tok/s | mfu %s | "
                     "%s%dm%02ds%s%dm%02ds", s->step, r->last_step, s->loss, vbuf, r->tps_avg,
                     mtext, compact ? "" : "elapsed ",
                     (int)el / 60, (int)el % 60, compact ? "<" : " | eta ", (int)eta / 60,
                     (int)eta % 60);
            if (cols <= 0 || (int)strlen(text) < cols)
                break;
        }
        if (cols > 0) {
            width = cols - (int)strlen(text) - 4;
            width = width > 30 ? 30 : width < 5 ? 0 : width;
        }
        int fill = total ? (int)(width * done / total) : width;
        const char *on = r->tty > 1 ? "\033[32m" : "", *off = r->tty > 1 ? "\033[0m" : "";
        if (width)
            fprintf(stderr, "[%s%.*s%s%*s] ", on, fill, "##############################", off,
                    width - fill, "");
        /* erase what a longer previous line left (a cursor control, not a colour) */
        fprintf(stderr, "%s\033[K%c", text, s->step == r->last_step || val >= 0 ? '\n' : '\r');
        fflush(stderr);
    } else if (s->step % r->o->log_every == 0 || s->step == r->last_step || val >= 0) {
        char mtext[16];
        coh_mfu_text(mfu, mtext, sizeof mtext);
        printf("step %ld/%ld loss %.4f%s lr %.3e tokens_per_s %.0f mfu %s elapsed %.1fs\n",
               s->step, r->last_step, s->loss, vbuf, s->lr, tps, mtext, el);
        fflush(stdout);
    }
}

/* The progress line's kind: 0 plain log lines (stderr not a terminal, directly or through the
 * launcher, or TERM=dumb), 1 a bar without colour (NO_COLOR set), 2 a bar in colour. */
static int progress_kind(void)
{
    const char *term = getenv("TERM"), *relay = getenv("COHORT_STDERR_TTY"),
               *no_color = getenv("NO_COLOR");
    if (!isatty(STDERR_FILENO) && !(relay && !strcmp(relay, "1")))
        return 0;
    if (term && !strcmp(term, "dumb"))
        return 0;
    return no_color && *no_color ? 1 : 2;
}

/* Test hook (environment COHORT_CKPT_PAUSE="RANK:SAVE", the job's first attempt only, as
 * COHORT_CKPT_KILL): rank RANK, at the start of its SAVE-th save, where a SIGINT already waits
 * for the save's end, says "checkpoint pause: rank R at the start of save S (step N)" and waits
 * for a signal (at most 60 s), so that a test interrupts a job at a known moment of a save
 * instead of guessing one with sleeps. */
static coh_status pause_point(const run *r, long step)
{
    static int saves;
    const char *v = getenv("COHORT_CKPT_PAUSE"), *restart = getenv("COHORT_RESTART_COUNT");
    int rank, nth, used = 0;
    saves++;
    if (!v || !*v || (restart && atoi(restart) > 0))
        return COH_OK;
    if (sscanf(v, "%d:%d%n", &rank, &nth, &used) != 2 || v[used] || rank < 0 || nth < 1)
        return coh_errf(COH_ERR_INVALID, "COHORT_CKPT_PAUSE '%s': expected RANK:SAVE (a rank "
                        "from 0, a save from 1)", v);
    if (rank != r->par.rank || nth != saves)
        return COH_OK;
    fprintf(stderr, "checkpoint pause: rank %d at the start of save %d (step %ld), waiting for "
            "a signal\n", rank, saves, step);
    fflush(stderr);
    for (int i = 0; i < 600 && !pending; i++)
        nanosleep(&(struct timespec){0, 100 * 1000 * 1000}, NULL); /* a signal cuts it short */
    return COH_OK;
}

static coh_status save(run *r, long step)
{
    coh_loader_pos pos;
    coh_loader_position(r->train, &pos);
    snprintf(saving_tmp[0], sizeof saving_tmp[0], "%s.state%ld.tmp.%ld", r->o->save, step,
             (long)getpid());
    snprintf(saving_tmp[1], sizeof saving_tmp[1], "%s.tmp.%ld", r->o->save, (long)getpid());
    /* or, in a save at the committed checkpoint's own step, the state's other name */
    snprintf(saving_tmp[2], sizeof saving_tmp[2], "%s.state%ld.1.tmp.%ld", r->o->save, step,
             (long)getpid());
    saving = 1;
    /* a failed save removes its own uncommitted state file (ckpt_drop_uncommitted) */
    coh_status st = pause_point(r, step);
    if (!st)
        st = coh_par_trainer_save(r->pt, r->o->save, r->o->tokenizer, &pos, r->threads);
    return st; /* still saving: stop_together ends it */
}

/* After a save, while a signal still waits (saving): the signal the ranks stop on, 0 to go on.
 * Every rank takes the largest one any rank deferred during the save, so that all stop or none
 * does: a rank that stopped alone would leave the others in the next step's collectives, and a
 * rank the signal missed (another node's launcher was not interrupted) would run that step
 * alone. A signal that came after this rank gave its part stops this rank as one after a save
 * does (its peers got it too, or they find this rank gone). *st receives the exchange's
 * failure when the save had none. */
static int stop_together(run *r, coh_status *st)
{
    int32_t mine = pending, all = mine;
    if (r->par.world_size > 1) {
        coh_status s2 = coh_allreduce(r->par.world, &mine, &all, 1, COH_I32, COH_MAX);
        if (s2 && !*st)
            *st = s2;
        /* rank 0's line is out before any rank ends: a launcher that sees a rank die of a
         * signal it did not forward stops the others at once (cohort run's teardown) */
        if (all && !s2) {
            say_interrupted();
            coh_barrier(r->par.world);
        }
    }
    saving = 0;
    return all ? all : pending;
}

static coh_status loop(run *r)
{
    const train_opts *o = r->o;
    double tokens = (double)o->tc.batch * o->tc.seq * o->tc.accum * r->par.mesh->dp *
                    (o->devices > 0 ? o->devices : 1);
    int lead = r->par.rank == 0;
    long saved = o->resume && o->save && !strcmp(o->resume, o->save) ? r->first_step : -1;
    if (r->resume && r->resume != o->resume) /* a restart resumed from --save */
        saved = r->first_step;
    struct sigaction was;
    if (lead)
        set_interrupt_line(o, r->first_step, saved, 0);
    /* an ignored SIGINT (nohup, a script's background job) stays ignored */
    if (!sigaction(SIGINT, NULL, &was) && was.sa_handler != SIG_IGN)
        signal(SIGINT, on_interrupt);
    for (long step = r->first_step; step < r->last_step; step++) {
        coh_step_stats s;
        double t0 = coh_now_s();
        coh_status st = coh_par_trainer_step(r->pt, next_batch, r->train, &s);
        if (st)
            return st;
        if (o->metrics && (st = cli_par_memory(&r->par, r->pt, o, cli_peak_rss(), r->mem)))
            return st;
        /* MFU against every rank's peak: the tokens are the whole job's */
        double tps = tokens / (coh_now_s() - t0),
               mfu = tps * r->flops_per_token / (r->peak_flops * r->par.world_size);
        double val = -1;
        if (r->val && (s.step % o->val_every == 0 || s.step == r->last_step) &&
            (st = validate(r, &val)))
            return st;
        if (lead && mfu > 1 && !r->mfu_warned) {
            r->mfu_warned = 1;
            if (o->peak_gflops > 0)
                coh_warn("mfu reads %.0f%% against the peak given (%g GFLOP/s, %s), so that "
                         "peak is low: mfu is shown as n/a where it reads above 100%%",
                         mfu * 100, o->peak_gflops, o->peak_origin);
            else
                coh_warn("mfu reads %.0f%% against the %s peak measured at start (%.1f GFLOP/s), "
                         "so that peak was low (other work on the machine while it was "
                         "measured): mfu is shown as n/a where it reads above 100%%", mfu * 100,
                         o->cfg.par.precision == COH_PREC_BF16_MIXED ? "bf16 GEMM" : "sgemm",
                         r->peak_flops * 1e-9);
        }
        if (lead) {
            write_metrics(r, &s, tps, mfu, val);
            show_progress(r, &s, tps, mfu, val);
        }
        int saves = o->save &&
                    ((o->save_every && s.step % o->save_every == 0) || s.step == r->last_step);
        if (lead)
            set_interrupt_line(o, s.step, saved, saves);
        if (saves) {
            st = save(r, s.step);
            if (!st)
                saved = s.step;
            if (lead)
                set_interrupt_line(o, s.step, saved, 0);
            int sig = stop_together(r, &st);
            if (sig) /* it came during the save, which is now over on every rank */
                die_of(sig);
            if (st)
                return st;
        }
    }
    return COH_OK;
}

/* After the launcher restarted the job (--max-restarts), continue from the last checkpoint. */
static const char *resume_path(const train_opts *o)
{
    coh_launch_env env; /* any launcher's restart count: cohort run's, torchrun's, Slurm's */
    char sp[4200];
    if (o->resume || !o->save || coh_launch_env_read(&env) || env.restart_count < 1)
        return o->resume;
    if (coh_ckpt_state_path(o->save, sp, sizeof sp) || access(sp, R_OK))
        return NULL; /* nothing committed yet: the job starts again */
    coh_info("restart %d: resuming from '%s'", env.restart_count, o->save);
    return o->save;
}

/* The peak MFU is taken against: given (--peak-gflops, COHORT_PEAK_GFLOPS), else measured
 * here, before the model exists (so that the probe's buffers are not in training's resident
 * peak), by rank 0 alone: only rank 0 reports MFU, and probes of every rank at once would share
 * the cores and each read low. 0 on the other ranks. */
static double peak_flops(const train_opts *o)
{
    if (o->peak_gflops > 0)
        return o->peak_gflops * 1e9;
    coh_launch_env env;
    if (!coh_launch_env_read(&env) && env.rank > 0)
        return 0;
    return o->cfg.par.precision == COH_PREC_BF16_MIXED ? coh_measure_bf16_gemm_flops(1024)
                                                         : coh_measure_sgemm_flops(1024);
}

/* "sgemm peak 61.2 GFLOP/s" measured, "peak 100 GFLOP/s (--peak-gflops)" given, "MFU against
 * rank 0's peak" on the other ranks. */
static void peak_text(const train_opts *o, double flops, int rank, char *buf, size_t cap)
{
    if (o->peak_gflops > 0)
        snprintf(buf, cap, "peak %g GFLOP/s (%s)", o->peak_gflops, o->peak_origin);
    else if (rank > 0)
        snprintf(buf, cap, "MFU against rank 0's peak");
    else
        snprintf(buf, cap, "%s peak %.1f GFLOP/s",
                 o->cfg.par.precision == COH_PREC_BF16_MIXED ? "bf16 GEMM" : "sgemm",
                 flops * 1e-9);
}

int cli_train_run(const train_opts *o)
{
    run r = {.o = o, .tty = progress_kind(), .threads = coh_get_threads(),
             .resume = resume_path(o)};
    r.peak_flops = peak_flops(o);
    coh_status st = setup(&r);
    if (!st && o->metrics && (r.par.rank == 0 || r.par.world_size == 1) &&
        !(r.metrics = fopen(o->metrics, r.resume ? "a" : "w")))
        st = coh_errf(COH_ERR_IO, "cannot open metrics file '%s'", o->metrics);
    if (!st) {
        r.first_step = coh_trainer_get_step(r.t);
        r.last_step = o->stop_at && o->stop_at < o->tc.steps ? o->stop_at : o->tc.steps;
        r.flops_per_token = coh_gpt_flops_per_token(&o->tc.model, o->tc.seq);
        char peak[96];
        peak_text(o, r.peak_flops, r.par.rank, peak, sizeof peak);
        const char *spin = coh_openmp_spin_text();
        coh_info("device %s; blas kernel %s, %d threads (%s), %s; %llu training tokens%s%s",
                 coh_backend_name(coh_backend_current()), coh_blas_kernel(), r.threads,
                 o->cfg.threads > 0 ? "--threads" : coh_threads_origin(), peak,
                 (unsigned long long)coh_loader_tokens(r.train), *spin ? "; " : "", spin);
        cli_par_print_start(o, &r.par, r.pt);
        r.t_start = coh_now_s();
        st = loop(&r);
        if (!st && o->cfg.par.pp > 1 && !(st = coh_par_trainer_check_tied(r.pt)) &&
            r.par.rank == 0)
            coh_info("tied embedding: the first and last stage's copies are bit-identical");
        if (!st && o->cfg.par.tp > 1 && !(st = coh_par_trainer_check_replicated(r.pt)) &&
            r.par.rank == 0)
            coh_info("tensor parallelism: the replicated tensors (LayerNorms, position "
                     "embedding, row-parallel biases) are bit-identical on the %d tp ranks",
                     (int)o->cfg.par.tp);
        if (!st)
            cli_par_print_peak(&r.par, r.pt, o);
        if (!st && o->dump_params)
            st = cli_par_dump(o, &r.par, r.pt);
    }
    if (!st) {
        char rss[32], grow[32], pred[32], apk[32];
        coh_dev_memory dm;
        coh_dev_memory_get(&dm);
        coh_par_memory pm;
        if (!cli_par_predict(o, &r.par, &pm))
            snprintf(pred, sizeof pred, "nothing for this strategy");
        uint64_t peak = cli_peak_rss();
        double el = coh_now_s() - r.t_start;
        long steps = r.last_step - r.first_step;
        coh_info("done: %ld steps in %.1fs, %.0f tokens/s; peak rss %s, %s over the start "
                 "(engine predicted %s); allocator peak %s", steps, el,
                 el > 0 ? steps * (double)o->tc.batch * o->tc.seq * o->tc.accum *
                              r.par.mesh->dp * (o->devices > 0 ? o->devices : 1) / el : 0.0,
                 coh_size_format(peak, rss, sizeof rss),
                 coh_size_format(peak > r.par.base_rss ? peak - r.par.base_rss : 0, grow,
                                 sizeof grow),
                 pm.total ? coh_size_format(pm.total, pred, sizeof pred) : pred,
                 coh_size_format(dm.peak, apk, sizeof apk));
    }
    if (r.metrics)
        fclose(r.metrics);
    coh_loader_destroy(r.train);
    coh_loader_destroy(r.val);
    coh_par_trainer_destroy(r.pt);
    cli_par_close(&r.par);
    free(r.mem);
    return st ? cli_fail(CMD, st) : CLI_OK;
}
