/* commit.h: a checkpoint committed as a whole: step-suffixed files, the weights file renamed
 * into place last naming its step's state, older files removed only after that commit; and the
 * fault-injection points that tests use to kill a rank inside a save. Internal. */
#ifndef COHORT_CKPT_COMMIT_H
#define COHORT_CKPT_COMMIT_H

#include <stddef.h>

#include "cohort/checkpoint.h"
#include "cohort/status.h"

/* A save's tag: its step, and which of two sets of names its files take: "<step>" (gen 0) or
 * "<step>.1" (gen 1), as in "ck.state40.1" and "ck.shard40.1-0-of-2". The files beside the
 * commit are written, then the commit names them: a save at the step of the checkpoint already
 * committed at its path would otherwise rename its files over the ones that commit names before
 * its own commit, and a crash or a failure in between would leave the old commit naming the
 * new, unfinished save's files (same step, so no check could tell). Such a save takes the other
 * set (ckpt_tag_for), so the old checkpoint stays whole until the new commit replaces it. */
typedef struct ckpt_tag {
    long step;
    int gen;
} ckpt_tag;
/* The tag of a save of step `step` at `path`: gen 1 when the checkpoint committed there names
 * gen 0 of this very step, else gen 0 (no checkpoint, an unreadable one, another step, or gen 1
 * of this step). */
ckpt_tag ckpt_tag_for(const char *path, long step);
/* The tag the open commit file `f` of checkpoint `path` names: its "state_suffix", whose step
 * must be the file's "step"; gen 0 of its "step" for the older layout without a suffix. */
coh_status ckpt_tag_of(const coh_st_file *f, const char *path, ckpt_tag *out);
/* ".state<tag>" into buf (>= 40 bytes): the commit's "state_suffix" metadata. */
void ckpt_state_suffix(char *buf, size_t cap, ckpt_tag t);
/* "<path>.state<tag>": the state file of the save tagged t. */
coh_status ckpt_state_name(char *buf, size_t cap, const char *path, ckpt_tag t);

/* After a save of `path` that failed with `st`: its step's state file `state`, written before
 * the commit failed, is removed unless the checkpoint names it (the failure came after the
 * commit), so the previous checkpoint stays whole and alone. Returns st, its message kept. */
coh_status ckpt_drop_uncommitted(coh_status st, const char *path, const char *state);

/* After the commit of tag `keep` (one process, once every rank's files of that save exist):
 * removes the checkpoint's files of every other tag (shard sets, indexes, state files, the
 * older unsuffixed state) and the temporary files a killed save left. */
void ckpt_remove_others(const char *path, ckpt_tag keep);
/* 1 when a directory entry, past the checkpoint's base name (`s`), is one that
 * ckpt_remove_others removes: a file of the checkpoint of another tag than *keep (NULL: any
 * file of the checkpoint), or a temporary file of any tag (once a save is committed and every
 * rank has written it, nothing of this job is writing another). */
int ckpt_other_file(const char *s, const ckpt_tag *keep);

/* Fault injection (environment COHORT_CKPT_KILL="RANK:SAVE:POINT", first attempt only):
 * ckpt_fault_begin starts a save of this process (COH_ERR_INVALID for a malformed value),
 * ckpt_fault_point is one step of it (file written, file renamed, cleanup): at the POINT-th
 * step of the SAVE-th save, rank RANK kills itself with SIGKILL. ckpt_fault_end ends the save. */
coh_status ckpt_fault_begin(void);
void ckpt_fault_point(const char *what, const char *file);
void ckpt_fault_end(void);

#endif
