/* commit.h: a checkpoint committed as a whole: step-suffixed files, the weights file renamed
 * into place last naming its step's state, older files removed only after that commit; and the
 * fault-injection points that tests use to kill a rank inside a save. Internal. */
#ifndef COHORT_CKPT_COMMIT_H
#define COHORT_CKPT_COMMIT_H

#include <stddef.h>

#include "cohort/status.h"

/* "<path>.state<step>": the state file of the checkpoint committed at `step`. */
coh_status ckpt_state_name(char *buf, size_t cap, const char *path, long step);
/* ".state<step>" into buf (>= 32 bytes): the weights file's "state_suffix" metadata. */
void ckpt_state_suffix(char *buf, size_t cap, long step);

/* After a save of `path` that failed with `st`: its step's state file `state`, written before
 * the commit failed, is removed unless the checkpoint names it (the failure came after the
 * commit), so the previous checkpoint stays whole and alone. Returns st, its message kept. */
coh_status ckpt_drop_uncommitted(coh_status st, const char *path, const char *state);

/* After the commit of step `keep` (one process, once every rank's files of that step exist):
 * removes the checkpoint's files of every other step (shard sets, indexes, state files, the
 * older unsuffixed state) and the temporary files a killed save left. */
void ckpt_remove_others(const char *path, long keep);
/* 1 when a directory entry, past the checkpoint's base name (`s`), is one that
 * ckpt_remove_others removes: a file of the checkpoint for a step other than `keep`, or a
 * temporary file of any step (once a step is committed and every rank has written it, nothing
 * of this job is writing another). */
int ckpt_other_file(const char *s, long keep);

/* Fault injection (environment COHORT_CKPT_KILL="RANK:SAVE:POINT", first attempt only):
 * ckpt_fault_begin starts a save of this process (COH_ERR_INVALID for a malformed value),
 * ckpt_fault_point is one step of it (file written, file renamed, cleanup): at the POINT-th
 * step of the SAVE-th save, rank RANK kills itself with SIGKILL. ckpt_fault_end ends the save. */
coh_status ckpt_fault_begin(void);
void ckpt_fault_point(const char *what, const char *file);
void ckpt_fault_end(void);

#endif
