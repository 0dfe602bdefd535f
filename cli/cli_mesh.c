/* cli_mesh.c: the mesh of a job in JSON, one format for the trainer's dry run and the planner. */
#include "cli_mesh.h"

#include "cohort/parallel.h"

static void peers(coh_jw *w, const char *axis, int dp, int pp, int tp, int d, int p, int t)
{
    int n = axis[0] == 'd' ? dp : axis[0] == 'p' ? pp : tp;
    coh_jw_key(w, axis);
    coh_jw_array_begin(w);
    for (int i = 0; i < n; i++)
        coh_jw_int(w, coh_mesh_rank(dp, pp, tp, axis[0] == 'd' ? i : d,
                                    axis[0] == 'p' ? i : p, axis[0] == 't' ? i : t));
    coh_jw_array_end(w);
}

static void link_field(coh_jw *w, const char *key, int inter)
{
    if (inter < 0)
        coh_jw_field_string(w, key, NULL);
    else
        coh_jw_field_string(w, key, inter ? "inter" : "intra");
}

static void stage_json(coh_jw *w, int s, const coh_plan_stage_view *v)
{
    coh_jw_object_begin(w);
    coh_jw_field_int(w, "stage", s);
    coh_jw_field_int(w, "blocks", v->blocks);
    coh_jw_field_int(w, "params", v->params);
    coh_jw_field_uint(w, "memory_bytes", v->memory_bytes);
    coh_jw_key(w, "bytes");
    coh_jw_object_begin(w);
    coh_jw_field_double(w, "pipeline_send", v->pipe_send_bytes);
    coh_jw_field_double(w, "tp_allreduce", v->tp_allreduce_bytes);
    coh_jw_field_double(w, "dp_reduce", v->dp_reduce_bytes);
    coh_jw_field_double(w, "zero_gather", v->zero_gather_bytes);
    coh_jw_field_double(w, "embedding_allreduce", v->embed_allreduce_bytes);
    coh_jw_object_end(w);
    coh_jw_field_int(w, "dp_buckets", v->dp_buckets);
    coh_jw_key(w, "dp_bucket_values"); /* the first COH_BUCKETS_LISTED */
    coh_jw_array_begin(w);
    for (int i = 0; i < v->dp_buckets && i < COH_BUCKETS_LISTED; i++)
        coh_jw_double(w, v->dp_bucket_values[i]);
    coh_jw_array_end(w);
    coh_jw_key(w, "links");
    coh_jw_object_begin(w);
    link_field(w, "next_stage", v->next_stage_inter);
    link_field(w, "dp", v->dp_inter);
    link_field(w, "tp", v->tp_inter);
    coh_jw_object_end(w);
    coh_jw_object_end(w);
}

void cli_mesh_json(coh_jw *w, int dp, int pp, int tp, int per_node,
                   const coh_plan_stage_view *stages)
{
    long world = (long)dp * pp * tp;
    if (per_node < 1)
        per_node = (int)world;
    coh_jw_key(w, "mesh");
    coh_jw_object_begin(w);
    coh_jw_field_int(w, "world", world);
    coh_jw_field_int(w, "ranks_per_node", per_node);
    coh_jw_field_string(w, "order", "tp fastest, then dp, then pp");
    coh_jw_object_end(w);
    coh_jw_key(w, "ranks");
    coh_jw_array_begin(w);
    for (long r = 0; r < world; r++) {
        int d, p, t;
        coh_mesh_coords(r, dp, pp, tp, &d, &p, &t);
        coh_jw_object_begin(w);
        coh_jw_field_int(w, "rank", r);
        coh_jw_field_int(w, "node", r / per_node);
        coh_jw_field_int(w, "stage", p);
        coh_jw_field_int(w, "dp_rank", d);
        coh_jw_field_int(w, "tp_rank", t);
        coh_jw_key(w, "peers");
        coh_jw_object_begin(w);
        peers(w, "dp", dp, pp, tp, d, p, t);
        peers(w, "pp", dp, pp, tp, d, p, t);
        peers(w, "tp", dp, pp, tp, d, p, t);
        coh_jw_object_end(w);
        coh_jw_object_end(w);
    }
    coh_jw_array_end(w);
    coh_jw_key(w, "stages");
    coh_jw_array_begin(w);
    for (int s = 0; s < pp; s++)
        stage_json(w, s, &stages[s]);
    coh_jw_array_end(w);
}
