/* curriculum.c — the stage plan, stage switching and the data cursor (see curriculum.h). */
#include "train/curriculum.h"
#include <math.h>
#include <stdio.h>
#include <string.h>
#include "core/alloc.h"
#include "core/error.h"
#include "io/checkpoint.h"
#include "io/mixture.h"
#include "io/metrics.h"
#include "parallel/comm_host.h"
#include "parallel/grid.h"

/* ---- the plan ---------------------------------------------------------------------------- */

/* The data a stage reads: its own train_files or mixture, else &data's (with the positions). */
static void stage_data(const config_t *cfg, const cfg_stage_t *st, curric_stage_t *out, mix_spec_t *mix) {
    const bool own_files = st && stage_sets(st, STAGE_TRAIN_FILES), own_mix = st && stage_sets(st, STAGE_MIXTURE);
    const char *text;
    if (own_files || own_mix) {
        const int k = own_mix ? STAGE_MIXTURE : STAGE_TRAIN_FILES;
        text = own_mix ? st->mixture : st->train_files;
        out->data_key = own_mix ? "&stage mixture" : "&stage train_files";
        out->data_line = st->key_line[k], out->data_col = st->key_col[k];
    } else if (cfg->mixture[0]) {
        text = cfg->mixture;
        out->data_key = "&data mixture";
        out->data_line = cfg->mixture_line, out->data_col = cfg->mixture_col;
    } else {
        text = cfg->train_files;
        out->data_key = "&data train_files";
        out->data_line = cfg->train_files_line, out->data_col = cfg->train_files_col;
    }
    snprintf(out->data, sizeof out->data, "%s", text);
    char err[512];
    if (strstr(out->data_key, "mixture")) {
        int rc = mixture_parse(text, mix, err, sizeof err);
        ASSERT(rc == 0); /* checked with the namelist */
    } else {
        memset(mix, 0, sizeof *mix);
        mix->n = 1;
        snprintf(mix->patterns[0], CFG_STR, "%s", text);
        mix->weight[0] = 1.0;
    }
}

/* The source set of a pattern text: an earlier one with the same text, or a new one. */
static int set_of(curriculum_t *c, const char *patterns) {
    for (int i = 0; i < c->n_sets; i++)
        if (!strcmp(c->set_patterns[i], patterns)) return i;
    if (c->n_sets == CURRIC_MAX_SETS)
        fatal_user("the &stage groups and mixtures name more than %d distinct data sources", CURRIC_MAX_SETS);
    snprintf(c->set_patterns[c->n_sets], CFG_STR, "%s", patterns);
    return c->n_sets++;
}

static void plan_lr(const config_t *cfg, const cfg_stage_t *st, curric_stage_t *s) {
    s->lr = lr_piece_from(cfg);
    s->own_lr = st && (stage_sets(st, STAGE_LR) || stage_sets(st, STAGE_MIN_LR) ||
                       stage_sets(st, STAGE_WARMUP_STEPS) || stage_sets(st, STAGE_LR_SCHEDULE));
    if (!s->own_lr) return;
    s->lr.warmup_steps = 0; /* a piece warms up only when it says so: the run warmed up already */
    if (stage_sets(st, STAGE_LR)) s->lr.lr = st->lr;
    if (stage_sets(st, STAGE_MIN_LR)) s->lr.min_lr = st->min_lr;
    if (stage_sets(st, STAGE_WARMUP_STEPS)) s->lr.warmup_steps = st->warmup_steps;
    if (stage_sets(st, STAGE_LR_SCHEDULE)) snprintf(s->lr.schedule, sizeof s->lr.schedule, "%s", st->lr_schedule);
}

/* Stage s's shape; a global batch the micro-batch does not divide is refused here, where the
 * micro-batch the planner chose (micro_batch = 0) is known. */
static void plan_shape(const config_t *cfg, int micro_batch, int global_batch,
                       const cfg_stage_t *st, curric_stage_t *s, int idx) {
    s->T = st && stage_sets(st, STAGE_SEQ_LEN) ? st->seq_len : cfg->seq_len;
    s->global_batch = st && stage_sets(st, STAGE_GLOBAL_BATCH) ? st->global_batch : global_batch;
    const int per = micro_batch * cfg->dp;
    s->accum = s->global_batch / per;
    if (s->accum < 1 || s->accum * per != s->global_batch)
        fatal_user("%s:%d:%d: &stage global_batch (stage %d of %d): global_batch = %d must be a multiple "
                   "of micro_batch * dp = %d * %d (the micro_batch the planner chose)", cfg->source_path,
                   st ? st->key_line[STAGE_GLOBAL_BATCH] : 1, st ? st->key_col[STAGE_GLOBAL_BATCH] : 1,
                   idx + 1, cfg->n_stages, s->global_batch, micro_batch, cfg->dp);
}

/* Where each stage ends, in steps: until_step, or the step count at which the tokens seen reach
 * until_tokens; the last stage runs to max_steps. */
static void plan_ends(curriculum_t *c, const config_t *cfg) {
    int64_t start = 0, tokens = 0;
    for (int s = 0; s < c->n_stages; s++) {
        curric_stage_t *p = &c->stage[s];
        const cfg_stage_t *st = s < cfg->n_stages ? &cfg->stages[s] : NULL;
        p->start = start;
        int64_t end = cfg->max_steps;
        if (st && stage_sets(st, STAGE_UNTIL_STEP)) {
            end = st->until_step;
        } else if (st && stage_sets(st, STAGE_UNTIL_TOKENS)) {
            const int64_t per_step = (int64_t)p->global_batch * p->T;
            const int64_t left = st->until_tokens > tokens ? st->until_tokens - tokens : 0;
            end = start + (left + per_step - 1) / per_step;
            c->by_tokens = true;
        }
        if (s == c->n_stages - 1 && end < cfg->max_steps) end = cfg->max_steps;
        if (end < start) end = start;
        tokens += (end - start) * (int64_t)p->global_batch * p->T;
        p->end = end;
        start = end;
    }
}

int curric_plan(curriculum_t *c, const config_t *cfg, int micro_batch, int global_batch) {
    memset(c, 0, sizeof *c);
    c->cur = -1;
    c->planned_sample = -1;
    c->seed = (uint64_t)cfg->seed;
    c->staged = cfg->n_stages > 0 || cfg->mixture[0];
    c->n_stages = cfg->n_stages > 0 ? cfg->n_stages : 1;
    const bool has_data = cfg->train_files[0] || stages_have_data(cfg);
    for (int s = 0; s < c->n_stages; s++) {
        const cfg_stage_t *st = cfg->n_stages ? &cfg->stages[s] : NULL;
        curric_stage_t *p = &c->stage[s];
        plan_shape(cfg, micro_batch, global_batch, st, p, s);
        plan_lr(cfg, st, p);
        if (p->accum > c->max_accum) c->max_accum = p->accum;
        if (p->global_batch > c->max_global_batch) c->max_global_batch = p->global_batch;
        if (!has_data) continue;
        mix_spec_t mix;
        stage_data(cfg, st, p, &mix);
        p->n_src = mix.n;
        for (int k = 0; k < mix.n; k++) {
            p->set[k] = set_of(c, mix.patterns[k]);
            p->weight[k] = mix.weight[k];
        }
        mixture_cumulative(p->weight, p->n_src, p->cum);
    }
    plan_ends(c, cfg);
    c->model_T = cfg->seq_len;
    c->at.T = cfg->seq_len;
    c->src = xmalloc(sizeof(int) * (size_t)c->max_global_batch);
    c->index = xmalloc(sizeof(int64_t) * (size_t)c->max_global_batch);
    return c->max_accum;
}

/* ---- data -------------------------------------------------------------------------------- */

/* "path:line:col: &stage mixture (stage 2 of 3): " or "path: &data train_files: " for messages. */
static void where(const curriculum_t *c, const config_t *cfg, int s, char *buf, size_t len) {
    const curric_stage_t *p = &c->stage[s];
    char stage[48] = "";
    if (!strncmp(p->data_key, "&stage", 6)) snprintf(stage, sizeof stage, " (stage %d of %d)", s + 1, cfg->n_stages);
    if (p->data_line > 0)
        snprintf(buf, len, "%s:%d:%d: %s%s", cfg->source_path, p->data_line, p->data_col, p->data_key, stage);
    else
        snprintf(buf, len, "%s: %s%s%s", cfg->source_path, p->data_key, stage,
                 p->data_line < 0 ? " (command line)" : "");
}

/* Every rank opens the files itself (some may see a file that others do not): agreed, once. */
static void agree(const char *prefix, int failed, const char *err) {
    char msg[1800];
    if (failed) snprintf(msg, sizeof msg, "%s: %s", prefix, err);
    comm_agree_or_exit(MPI_COMM_WORLD, LLMT_EXIT_USER, "checking the data", failed ? msg : NULL);
}

void curric_agree_data_error(const char *source_path, MPI_Comm comm, int failed, const char *err) {
    char msg[1400];
    if (failed) snprintf(msg, sizeof msg, "%s: &data %s", source_path, err);
    comm_agree_or_exit(comm, LLMT_EXIT_USER, "checking the data", failed ? msg : NULL);
}

/* The first stage that reads set i, for messages. */
static int first_stage_of(const curriculum_t *c, int i) {
    for (int s = 0; s < c->n_stages; s++)
        for (int k = 0; k < c->stage[s].n_src; k++)
            if (c->stage[s].set[k] == i) return s;
    return 0;
}

static void open_set(curriculum_t *c, const config_t *cfg, const grid_t *grid, int i) {
    shard_set_t *set = &c->sets[i];
    char err[1024] = "", at[CFG_STR + 128];
    where(c, cfg, first_stage_of(c, i), at, sizeof at);
    const char *what = strstr(c->stage[first_stage_of(c, i)].data_key, "mixture") ? "mixture" : "train_files";
    int bad = shard_set_open(set, c->set_patterns[i], what, cfg->choice.data_format, err,
                             sizeof err) != 0;
    agree(at, bad, err);
    const double per_rank = (double)set->token_bytes / grid->world_size;
    if (per_rank > (double)SHARD_SCAN_MAX_BYTES_PER_RANK) {
        if (grid->world_rank == 0)
            printf("data: '%s' holds %.1f GiB of tokens: no startup scan above %.0f GiB per rank; every "
                   "window is checked against vocab_size as it is read\n", c->set_patterns[i],
                   (double)set->token_bytes / (1 << 30), (double)SHARD_SCAN_MAX_BYTES_PER_RANK / (1 << 30));
        return;
    }
    bad = shard_set_check_tokens(set, cfg->vocab_size, grid->world_rank, grid->world_size, err,
                                 sizeof err) != 0;
    agree(at, bad, err);
}

void curric_open_data(curriculum_t *c, const config_t *cfg, const grid_t *grid) {
    for (int i = 0; i < c->n_sets; i++) open_set(c, cfg, grid, i);
    for (int s = 0; s < c->n_stages; s++) {
        curric_stage_t *p = &c->stage[s];
        for (int k = 0; k < p->n_src; k++) {
            char err[1024] = "", at[CFG_STR + 128];
            int bad = sampler_create(&p->sampler[k], &c->sets[p->set[k]], p->T, cfg->vocab_size, cfg->shuffle,
                                     (uint64_t)cfg->seed, err, sizeof err) != 0;
            where(c, cfg, s, at, sizeof at);
            agree(at, bad, err);
        }
    }
    c->opened = true;
}

void curric_destroy(curriculum_t *c) {
    for (int s = 0; c->opened && s < c->n_stages; s++)
        for (int k = 0; k < c->stage[s].n_src; k++) sampler_destroy(&c->stage[s].sampler[k]);
    for (int i = 0; c->opened && i < c->n_sets; i++) shard_set_close(&c->sets[i]);
    xfree(c->src);
    xfree(c->index);
    memset(c, 0, sizeof *c);
}

/* ---- stages ------------------------------------------------------------------------------ */

int curric_stage_for_step(const curriculum_t *c, int64_t step) {
    for (int s = 0; s < c->n_stages; s++)
        if (step < c->stage[s].end) return s;
    return c->n_stages - 1;
}

/* The positions, counted in windows of seq_len T from now on (same token offset, rounded up). */
static void cursor_to_T(curric_cursor_t *cur, int T, int n_sets) {
    if (cur->T == T) return;
    for (int i = 0; i < n_sets; i++) cur->pos[i] = (cur->pos[i] * cur->T + T - 1) / T;
    cur->T = T;
}

static void describe_lr(const curric_stage_t *p, char *buf, size_t len) {
    if (!p->own_lr) {
        snprintf(buf, len, "&train's schedule");
        return;
    }
    snprintf(buf, len, "%s %g -> %g, warmup %d, over %lld steps", p->lr.schedule, p->lr.lr, p->lr.min_lr,
             p->lr.warmup_steps, (long long)(p->end - p->start));
}

void curric_print_plan(const curriculum_t *c, const config_t *cfg) {
    printf("curriculum: %d stage%s, boundaries by %s (steps 1-based as logged):\n", c->n_stages,
           c->n_stages > 1 ? "s" : "", c->by_tokens ? "until_tokens" : "until_step");
    for (int s = 0; s < c->n_stages; s++) {
        const curric_stage_t *p = &c->stage[s];
        char lr[160];
        describe_lr(p, lr, sizeof lr);
        printf("  stage %d: steps %lld-%lld%s | seq_len %d | global_batch %d (accumulation %d) | lr %s | "
               "data '%s'\n", s + 1, (long long)p->start + 1, (long long)p->end,
               p->start >= cfg->max_steps ? " (after max_steps: not reached)" : "", p->T,
               p->global_batch, p->accum, lr, p->data);
    }
}

bool curric_enter(curriculum_t *c, int s) {
    const bool boundary = c->cur >= 0;
    c->cur = s;
    cursor_to_T(&c->at, c->stage[s].T, c->n_sets);
    c->planned_sample = -1;
    return boundary && c->staged;
}

void curric_announce(const curriculum_t *c, int64_t step, int micro_batch, int dp, bool root,
                     struct metrics *metrics) {
    const int s = c->cur;
    const curric_stage_t *p = &c->stage[s];
    if (root) {
        char lr[160];
        describe_lr(p, lr, sizeof lr);
        printf("stage %d/%d begins at step %lld: seq_len %d, global_batch %d (micro_batch %d x accumulation "
               "%d x dp %d), lr %s, data '%s'\n", s + 1, c->n_stages, (long long)step + 1, p->T,
               p->global_batch, micro_batch, p->accum, dp, lr, p->data);
    }
    metrics_write(metrics, "\"event\":\"stage\",\"stage\":%d,\"seq_len\":%d,\"global_batch\":%d,"
                  "\"accum\":%d,\"step\":%lld", s + 1, p->T, p->global_batch, p->accum, (long long)step);
}

/* The sources of the whole global batch of the step starting at sample `first` (every rank alike). */
static void plan_step(curriculum_t *c, int64_t first) {
    const curric_stage_t *p = &c->stage[c->cur];
    cursor_to_T(&c->at, p->T, c->n_sets); /* a cursor set by a rollback may count another T */
    int64_t local[MIX_MAX_SOURCES];
    for (int k = 0; k < p->n_src; k++) local[k] = c->at.pos[p->set[k]];
    mixture_assign(p->cum, p->n_src, c->seed, (uint64_t)first, p->global_batch, local, c->src, c->index);
    c->next = c->at;
    for (int k = 0; k < p->n_src; k++) c->next.pos[p->set[k]] = local[k];
    c->planned_sample = first;
}

int curric_fill(curriculum_t *c, int64_t step_sample, int64_t first, int B, int *inputs,
                int *targets, char *err, size_t errlen) {
    const curric_stage_t *p = &c->stage[c->cur];
    const int T = p->T;
    if (c->planned_sample != step_sample) plan_step(c, step_sample);
    if (p->n_src == 1) /* one source: its windows in order, as one contiguous read */
        return sampler_fill(&p->sampler[0], (uint64_t)c->index[first], B, inputs, targets, err, errlen);
    for (int b = 0; b < B; b++)
        if (sampler_fill(&p->sampler[c->src[first + b]], (uint64_t)c->index[first + b], 1,
                         inputs + (size_t)b * T, targets + (size_t)b * T, err, errlen) != 0)
            return -1;
    return 0;
}

void curric_commit(curriculum_t *c) {
    ASSERT(c->planned_sample == c->at_sample);
    c->at = c->next;
    c->at_sample += c->stage[c->cur].global_batch;
    c->planned_sample = -1;
}

double curric_lr(const curriculum_t *c, const config_t *cfg, int64_t step) {
    const curric_stage_t *p = &c->stage[c->cur];
    if (!p->own_lr) return lr_at(cfg, (int)step);
    return lr_piece_at(&p->lr, (int)(step - p->start));
}

bool curric_cursor_at(const curriculum_t *c, int64_t sample, curric_cursor_t *out) {
    if (sample == c->at_sample) *out = c->at;
    else if (c->planned_sample == c->at_sample && sample == c->at_sample + c->stage[c->cur].global_batch)
        *out = c->next;
    else return false;
    return true;
}

void curric_set_cursor(curriculum_t *c, const curric_cursor_t *cur, int64_t sample) {
    c->at = *cur;
    c->at_sample = sample;
    c->planned_sample = -1;
}

/* ---- checkpoints ------------------------------------------------------------------------- */

void curric_save_state(const curriculum_t *c, ckpt_state_t *st) {
    st->stage = c->cur < 0 ? 0 : c->cur;
    st->data_seq_len = c->at.T;
    st->n_data_pos = c->n_sets;
    for (int i = 0; i < c->n_sets; i++) {
        st->data_pos[i] = c->at.pos[i];
        snprintf(st->data_source[i], CKPT_SOURCE_LEN, "%s", c->set_patterns[i]);
    }
}

static bool world_root(void) {
    int rank = 0;
    MPI_CHECK(MPI_Comm_rank(MPI_COMM_WORLD, &rank));
    return rank == 0;
}

/* Positions of a file that names its sources: each source of the namelist continues from the
 * position saved under its own name, wherever either list has it. Sources neither list names
 * alike (a dataset moved, a pattern respelled) are paired in the order listed when there are as
 * many on each side, else the namelist's start from their beginning; each such decision is
 * said once. */
static void load_by_name(curriculum_t *c, const ckpt_state_t *st) {
    const int n_saved = (int)st->n_data_pos;
    int of_set[CURRIC_MAX_SETS], taken[CKPT_MAX_DATA_SOURCES] = {0};
    int unmatched = 0, unmatched_saved = n_saved;
    bool reordered = false;
    for (int i = 0; i < c->n_sets; i++) {
        of_set[i] = -1;
        for (int k = 0; k < n_saved && of_set[i] < 0; k++)
            if (!taken[k] && !strcmp(st->data_source[k], c->set_patterns[i])) of_set[i] = k;
        if (of_set[i] < 0) {
            unmatched++;
            continue;
        }
        taken[of_set[i]] = 1, unmatched_saved--;
        reordered |= of_set[i] != i;
    }
    const bool pair = unmatched > 0 && unmatched == unmatched_saved, root = world_root();
    for (int i = 0, k = 0; i < c->n_sets; i++) {
        if (of_set[i] >= 0) continue;
        if (pair) {
            while (taken[k]) k++;
            of_set[i] = k, taken[k] = 1;
            if (root)
                fprintf(stderr, "llmtrain: warning: resume: data source '%s' is not named in the checkpoint: "
                        "it continues from the position of the checkpoint's '%s' (the sources that match no "
                        "name are paired in the order listed)\n", c->set_patterns[i], st->data_source[k]);
        } else if (root) {
            fprintf(stderr, "llmtrain: warning: resume: data source '%s' is not in the checkpoint: it starts "
                    "from its beginning\n", c->set_patterns[i]);
        }
    }
    for (int k = 0; k < n_saved && root; k++)
        if (!taken[k])
            fprintf(stderr, "llmtrain: warning: resume: the checkpoint's data source '%s' is not in the "
                    "namelist: its position (%lld windows) is not used\n", st->data_source[k],
                    (long long)st->data_pos[k]);
    if (reordered && root)
        fprintf(stderr, "llmtrain: resume: the namelist lists the data sources in another order than the "
                "checkpoint: each continues from its own position (matched by name)\n");
    for (int i = 0; i < c->n_sets; i++) c->at.pos[i] = of_set[i] >= 0 ? st->data_pos[of_set[i]] : 0;
}

/* A file that names its sources is mapped by name (load_by_name). One without names but with a
 * cursor for as many sources is mapped by index; a file without a cursor (before stages
 * existed) read one source at the sample index; otherwise the cursor cannot be mapped and the
 * sources start from their beginning, said once. */
void curric_load_state(curriculum_t *c, const ckpt_state_t *st, int64_t sample_pos) {
    memset(&c->at, 0, sizeof c->at);
    c->at_sample = sample_pos;
    c->planned_sample = -1;
    if (st->has_data_pos && st->data_source[0][0]) {
        c->at.T = (int)st->data_seq_len;
        load_by_name(c, st);
        return;
    }
    if (st->has_data_pos && st->n_data_pos == c->n_sets) {
        c->at.T = (int)st->data_seq_len;
        for (int i = 0; i < c->n_sets; i++) c->at.pos[i] = st->data_pos[i];
        return;
    }
    c->at.T = c->model_T; /* what the sample index counted windows of */
    if (!st->has_data_pos && c->n_sets == 1) {
        c->at.pos[0] = sample_pos;
        return;
    }
    if (world_root())
        fprintf(stderr, "llmtrain: warning: resume: the checkpoint's data cursor (%lld sources) does not fit "
                "the namelist's %d data sources: every source starts from its beginning\n",
                (long long)(st->has_data_pos ? st->n_data_pos : 1), c->n_sets);
}
