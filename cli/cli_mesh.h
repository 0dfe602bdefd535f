/* cli_mesh.h: the mesh of a job as `cohort train --dry-run --json` and `cohort plan --explain
 * --json` both print it: every rank's stage and peers, and each stage's messages and memory. */
#ifndef COHORT_CLI_MESH_H
#define COHORT_CLI_MESH_H

#include "cohort/json_writer.h"
#include "cohort/planner.h"

/* Writes the keys "mesh", "ranks" and "stages" into the open object: ranks placed by the
 * trainer's order (coh_mesh_rank) on nodes of per_node consecutive ranks; stages[pp]. */
void cli_mesh_json(coh_jw *w, int dp, int pp, int tp, int per_node,
                   const coh_plan_stage_view *stages);

#endif
