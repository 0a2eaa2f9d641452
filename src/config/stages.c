/* stages.c — the &stage groups' and mixtures' syntax and checks (see stages.h). */
#include "config/stages.h"
#include "core/error.h"
#include <ctype.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

static const char *const stage_keys[CFG_STAGE_KEYS] = {
    "until_step", "until_tokens", "seq_len", "global_batch", "train_files",
    "mixture", "lr", "min_lr", "warmup_steps", "lr_schedule"};

int stage_key_index(const char *key) {
    for (int i = 0; i < CFG_STAGE_KEYS; i++)
        if (!strcmp(stage_keys[i], key)) return i;
    return -1;
}

bool stage_sets(const cfg_stage_t *st, int key) { return st->key_line[key] != 0; }

bool stages_have_data(const config_t *cfg) {
    if (cfg->mixture[0]) return true;
    for (int i = 0; i < cfg->n_stages; i++)
        if (!cfg->stages[i].train_files[0] && !cfg->stages[i].mixture[0]) return false;
    return cfg->n_stages > 0;
}

/* ---- mixture syntax ---------------------------------------------------------------------- */

static void trim(const char **a, const char **b) {
    while (*a < *b && isspace((unsigned char)**a)) (*a)++;
    while (*b > *a && isspace((unsigned char)(*b)[-1])) (*b)--;
}

/* One source "PATTERNS:WEIGHT" in [a, b). */
static int parse_source(const char *a, const char *b, mix_spec_t *out, char *err, size_t errlen) {
    trim(&a, &b);
    const char *colon = NULL;
    for (const char *c = a; c < b; c++)
        if (*c == ':') colon = c;
    if (!colon)
        return errf(err, errlen, "source '%.*s' has no ':WEIGHT' (e.g. 'data/web_*.bin:0.7')", (int)(b - a), a);
    const char *pa = a, *pb = colon, *wa = colon + 1, *wb = b;
    trim(&pa, &pb);
    trim(&wa, &wb);
    if (pa == pb) return errf(err, errlen, "source '%.*s' has no file pattern before ':'", (int)(b - a), a);
    if (out->n == MIX_MAX_SOURCES) return errf(err, errlen, "at most %d sources", MIX_MAX_SOURCES);
    char num[64], *end = NULL;
    if (wb - wa <= 0 || wb - wa >= (long)sizeof num)
        return errf(err, errlen, "source '%.*s': the weight after ':' is missing", (int)(b - a), a);
    memcpy(num, wa, (size_t)(wb - wa));
    num[wb - wa] = '\0';
    double w = strtod(num, &end);
    if (end == num || *end != '\0' || !(w >= 0) || w > 1e300)
        return errf(err, errlen, "source '%.*s': weight '%s' is not a number >= 0", (int)(b - a), a, num);
    snprintf(out->patterns[out->n], CFG_STR, "%.*s", (int)(pb - pa), pa);
    out->weight[out->n++] = w;
    return 0;
}

int mixture_parse(const char *text, mix_spec_t *out, char *err, size_t errlen) {
    memset(out, 0, sizeof *out);
    for (const char *a = text;;) {
        const char *b = strchr(a, ',');
        if (!b) b = a + strlen(a);
        if (parse_source(a, b, out, err, errlen) != 0) return -1;
        if (!*b) break;
        a = b + 1;
    }
    double sum = 0;
    for (int i = 0; i < out->n; i++) sum += out->weight[i];
    if (!(sum > 0)) return errf(err, errlen, "the weights sum to %g; they must sum to a positive number", sum);
    return 0;
}

/* ---- checks ------------------------------------------------------------------------------ */

typedef struct checker {
    const config_t *cfg;
    char *msg;
    size_t size;
} checker_t;

/* "path:line:col: &stage KEY: ..." at the key, or at the group when the stage did not set it. */
__attribute__((format(printf, 4, 5)))
static int stage_error(checker_t *c, int s, int key, const char *fmt, ...) {
    const cfg_stage_t *st = &c->cfg->stages[s];
    const int line = stage_sets(st, key) ? st->key_line[key] : st->line;
    const int col = stage_sets(st, key) ? st->key_col[key] : st->col;
    int n = snprintf(c->msg, c->size, "%s:%d:%d: &stage %s (stage %d of %d): ", c->cfg->source_path, line, col,
                     stage_keys[key], s + 1, c->cfg->n_stages);
    if (n < 0 || (size_t)n >= c->size) return -1;
    va_list ap;
    va_start(ap, fmt);
    vsnprintf(c->msg + n, c->size - (size_t)n, fmt, ap);
    va_end(ap);
    return -1;
}

/* until_step / until_tokens: one of them (the last stage may omit both), one kind for all
 * stages, strictly increasing. */
static int check_ends(checker_t *c) {
    const config_t *cfg = c->cfg;
    int kind = -1; /* STAGE_UNTIL_STEP or STAGE_UNTIL_TOKENS, from the first stage that sets one */
    int64_t prev = 0;
    for (int s = 0; s < cfg->n_stages; s++) {
        const cfg_stage_t *st = &cfg->stages[s];
        const bool by_step = stage_sets(st, STAGE_UNTIL_STEP), by_tokens = stage_sets(st, STAGE_UNTIL_TOKENS);
        if (by_step && by_tokens)
            return stage_error(c, s, STAGE_UNTIL_TOKENS, "set until_step or until_tokens, not both");
        if (!by_step && !by_tokens) {
            if (s == cfg->n_stages - 1) continue;
            return stage_error(c, s, STAGE_UNTIL_STEP, "every stage but the last needs until_step or "
                               "until_tokens (where it ends)");
        }
        const int k = by_step ? STAGE_UNTIL_STEP : STAGE_UNTIL_TOKENS;
        if (kind >= 0 && k != kind)
            return stage_error(c, s, k, "all stages end by the same measure: an earlier stage uses %s",
                               stage_keys[kind]);
        kind = k;
        const int64_t until = by_step ? st->until_step : st->until_tokens;
        if (until <= prev)
            return stage_error(c, s, k, "%s = %lld goes backwards: it must be larger than the previous "
                               "stage's %lld", stage_keys[k], (long long)until, (long long)prev);
        prev = until;
    }
    return 0;
}

static int check_data(checker_t *c, int s) {
    const cfg_stage_t *st = &c->cfg->stages[s];
    char err[512];
    mix_spec_t mix;
    if (stage_sets(st, STAGE_TRAIN_FILES) && stage_sets(st, STAGE_MIXTURE))
        return stage_error(c, s, STAGE_MIXTURE, "set train_files or mixture, not both");
    if (stage_sets(st, STAGE_MIXTURE) && mixture_parse(st->mixture, &mix, err, sizeof err) != 0)
        return stage_error(c, s, STAGE_MIXTURE, "%s", err);
    return 0;
}

static int check_shape(checker_t *c, int s) {
    const config_t *cfg = c->cfg;
    const cfg_stage_t *st = &cfg->stages[s];
    if (stage_sets(st, STAGE_SEQ_LEN) && st->seq_len > cfg->seq_len)
        return stage_error(c, s, STAGE_SEQ_LEN, "seq_len = %d is above &model seq_len = %d (the model's "
                           "positions and activations are sized for &model seq_len: raise that one)",
                           st->seq_len, cfg->seq_len);
    if (!stage_sets(st, STAGE_GLOBAL_BATCH)) return 0;
    const long long per = cfg->micro_batch > 0 ? (long long)cfg->micro_batch * cfg->dp : cfg->dp;
    if (st->global_batch % per != 0)
        return stage_error(c, s, STAGE_GLOBAL_BATCH, "global_batch = %d must be a multiple of %s = %lld",
                           st->global_batch, cfg->micro_batch > 0 ? "&train micro_batch * &parallel dp"
                           : "&parallel dp", per);
    const double tokens = (double)st->global_batch * (stage_sets(st, STAGE_SEQ_LEN) ? st->seq_len : cfg->seq_len);
    if (tokens > 2147483647.0)
        return stage_error(c, s, STAGE_GLOBAL_BATCH, "global_batch * seq_len = %.0f tokens per step exceed "
                           "2147483647 (counted in 32-bit integers)", tokens);
    return 0;
}

static int check_lr(checker_t *c, int s) {
    const config_t *cfg = c->cfg;
    const cfg_stage_t *st = &cfg->stages[s];
    const double lr = stage_sets(st, STAGE_LR) ? st->lr : cfg->lr;
    const double min_lr = stage_sets(st, STAGE_MIN_LR) ? st->min_lr : cfg->min_lr;
    if (min_lr > lr && (stage_sets(st, STAGE_LR) || stage_sets(st, STAGE_MIN_LR)))
        return stage_error(c, s, stage_sets(st, STAGE_MIN_LR) ? STAGE_MIN_LR : STAGE_LR,
                           "min_lr = %g must be <= lr = %g (unset ones come from &train)", min_lr, lr);
    return 0;
}

int stages_check(const config_t *cfg, char *msg, size_t msgsize) {
    checker_t c = {cfg, msg, msgsize};
    if (check_ends(&c) != 0) return -1;
    for (int s = 0; s < cfg->n_stages; s++)
        if (check_data(&c, s) || check_shape(&c, s) || check_lr(&c, s)) return -1;
    return 0;
}
