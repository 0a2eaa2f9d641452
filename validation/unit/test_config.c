/* test_config.c — the typed configuration (src/config/): defaults, every key reaching
 * its field, every error path with its exact one-line message (captured through
 * error_set_fatal_hook + longjmp), the cross-key checks, config_load over MPI, and the
 * config_to_namelist round trip. Reference: the schema in config.h / docs/design.md. */
#include <math.h>
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/resource.h>
#include <unistd.h>
#include <cmocka.h>
#include <mpi.h>
#include "config/config.h"
#include "core/error.h"
#include "model/spec.h"
#include "test_fatal.h"

#define PATH "inputs/x.nml"
#define DATA "&data train_files = 'data/train_*.bin' /\n" /* the one key a training run needs */

/* What llmtrain does with a namelist: the configuration's checks, then the model's shape rules
 * (model/spec.c), which name the keys' positions the configuration kept. */
static void read_namelist(const char *text, config_t *cfg) {
    config_parse(PATH, text, cfg);
    model_spec_check(MODEL_SPEC_OF(cfg), cfg->ep, &cfg->where);
}

static void parse_ok(const char *text, config_t *cfg) {
    if (setjmp(fatal_jump) != 0) fail_msg("unexpected error: %s\ntext:\n%s", fatal_message, text);
    read_namelist(text, cfg);
}

/* Parses text that must fail; returns the message without the "llmtrain: error: " prefix. */
static const char *parse_error(const char *text) {
    static config_t cfg; /* static: intact after the longjmp */
    memset(&cfg, 0, sizeof cfg);
    fatal_message[0] = '\0';
    if (setjmp(fatal_jump) == 0) {
        read_namelist(text, &cfg);
        config_destroy(&cfg);
        fail_msg("expected an error, but this parsed:\n%s", text);
    }
    config_destroy(&cfg); /* a configuration the model's rules refused was parsed */
    return caught_user_error_text();
}

#define EXPECT_ERROR(text, expected)                                                              \
    do {                                                                                          \
        const char *got_ = parse_error(text);                                                     \
        if (!strstr(got_, expected)) fail_msg("message\n  %s\ndoes not contain\n  %s", got_, expected); \
    } while (0)

/* ---- defaults and values ------------------------------------------------------------------ */

static void defaults_are_the_documented_values(void **state) {
    (void)state;
    config_t c;
    config_defaults(&c);
    assert_string_equal(c.name, "run");
    assert_string_equal(c.out_dir, "runs");
    assert_string_equal(c.mode, "train");
    assert_string_equal(c.device, "cpu");
    assert_int_equal(c.seed, 1337);
    assert_string_equal(c.init_from, "");
    assert_int_equal(c.n_prompt_ids, 0);
    assert_int_equal(c.max_new_tokens, 64);
    assert_true(c.temperature == 1.0);
    assert_int_equal(c.top_k, 40);
    assert_int_equal(c.n_layer, 12);
    assert_int_equal(c.n_head, 12);
    assert_int_equal(c.d_model, 768);
    assert_int_equal(c.d_ff, 3072); /* effective: 4 * d_model */
    assert_int_equal(c.vocab_size, 50257);
    assert_int_equal(c.seq_len, 1024);
    assert_true(c.dropout == 0.0);
    assert_int_equal(c.n_experts, 0);
    assert_int_equal(c.top_k_moe, 2);
    assert_int_equal(c.moe_every, 1);
    assert_true(c.capacity_factor == 1.25 && c.router_noise == 0.0);
    assert_true(c.aux_loss_coef == 0.01 && c.z_loss_coef == 0.001);
    assert_true(c.dp == 1 && c.tp == 1 && c.pp == 1 && c.ep == 1);
    assert_string_equal(c.schedule, "1f1b");
    assert_int_equal(c.virtual_stages, 1);
    assert_int_equal(c.zero_stage, 0);
    assert_string_equal(c.recompute, "none");
    assert_int_equal(c.recompute_layers, -1);
    assert_true(c.bucket_mb == 25.0);
    assert_int_equal(c.max_steps, 100);
    assert_int_equal(c.global_batch, 0); /* 0 = micro_batch * dp */
    assert_int_equal(c.micro_batch, 4);
    assert_true(c.lr == 6e-4 && c.min_lr == 0.0);
    assert_int_equal(c.warmup_steps, 0);
    assert_string_equal(c.lr_schedule, "cosine");
    assert_true(c.decay_fraction == 0.2 && c.weight_decay == 0.1);
    assert_true(c.beta1 == 0.9 && c.beta2 == 0.95 && c.eps == 1e-8 && c.grad_clip == 1.0);
    assert_string_equal(c.precision, "fp32");
    assert_string_equal(c.on_anomaly, "skip");
    assert_int_equal(c.inject_nan_step, -1);
    assert_string_equal(c.train_files, "");
    assert_string_equal(c.val_files, "");
    assert_false(c.shuffle);
    assert_int_equal(c.val_every, 0);
    assert_int_equal(c.val_batches, 8);
    assert_string_equal(c.tokenizer, "");
    assert_string_equal(c.data_format, "auto");
    assert_string_equal(c.ckpt_dir, "");
    assert_int_equal(c.ckpt_every, 0);
    assert_int_equal(c.ckpt_keep, 3);
    assert_string_equal(c.resume, "none");
    assert_true(c.timeout_s == 600);
    assert_true(c.io_timeout_s == 3600);
    assert_false(c.ckpt_overwrite);
    assert_int_equal(c.log_every, 1);
    assert_true(c.jsonl);
    assert_true(c.tensorboard);
    assert_true(c.peak_flops == 0);
    assert_string_equal(c.papi_events, "");
    assert_false(c.profile);
    assert_null(c.text);
}

static void minimal_file_gets_defaults_and_derived_d_ff_and_global_batch(void **state) {
    (void)state;
    config_t c;
    parse_ok("&model d_model = 64, n_head = 4 /\n&parallel dp = 2 /\n" DATA, &c);
    assert_int_equal(c.d_ff, 256);        /* 4 * d_model */
    assert_int_equal(c.global_batch, 8);  /* micro_batch * dp */
    assert_int_equal(c.n_layer, 12);
    assert_string_equal(c.train_files, "data/train_*.bin");
    assert_string_equal(c.source_path, PATH);
    assert_non_null(c.text);
    assert_true(strstr(c.text, "d_model = 64") != NULL);
    config_destroy(&c);
    assert_null(c.text);
}

static void every_key_reaches_its_field(void **state) {
    (void)state;
    config_t c;
    parse_ok("&run name = 'exp1', out_dir = '/scratch/runs', mode = 'eval', device = 'cpu', seed = 42,\n"
             "     init_from = 'w.h5', prompt_ids = 256 11 22, max_new_tokens = 5, temperature = 0,\n"
             "     top_k = 0 /\n"
             "&model n_layer = 2, n_head = 2, d_model = 32, d_ff = 100, vocab_size = 300, seq_len = 16,\n"
             "       dropout = 0, n_experts = 0, top_k = 2, moe_every = 1, capacity_factor = 1.25,\n"
             "       router_noise = 0, aux_loss_coef = 0.01, z_loss_coef = 0.001 /\n"
             "&parallel dp = 2, tp = 2, pp = 3, ep = 1, schedule = 'gpipe', virtual_stages = 1,\n"
             "          zero_stage = 0, recompute = 'full', recompute_layers = 1, bucket_mb = 4.5,\n"
             "          bind = 'none' /\n"
             "&train max_steps = 0, global_batch = 16, micro_batch = 2, lr = 1e-3, min_lr = 1d-5,\n"
             "       warmup_steps = 10, lr_schedule = 'wsd', decay_fraction = 1, weight_decay = 0,\n"
             "       beta1 = 0, beta2 = 0.999, eps = 1e-6, grad_clip = 0, precision = 'fp32',\n"
             "       on_anomaly = 'abort', inject_nan_step = 3 /\n"
             "&data train_files = 'a.bin b.bin', val_files = 'v.bin', shuffle = T, val_every = 10,\n"
             "      val_batches = 2, tokenizer = 'gpt2', format = 'nanogpt' /\n"
             "&checkpoint dir = 'ck', every = 50, keep = 1, resume = 'auto', timeout_s = 30.5,\n"
             "            io_timeout_s = 7200, overwrite = T, save_weights = F, striping_factor = 4,\n"
             "            striping_unit = 1048576 /\n"
             "&log every = 10, jsonl = F, tensorboard = .false., peak_flops = 1.2e14,\n"
             "     papi_events = '', profile = .false. /\n",
             &c);
    assert_string_equal(c.name, "exp1");
    assert_string_equal(c.out_dir, "/scratch/runs");
    assert_string_equal(c.mode, "eval");
    assert_string_equal(c.device, "cpu");
    assert_int_equal(c.seed, 42);
    assert_string_equal(c.init_from, "w.h5");
    assert_int_equal(c.n_prompt_ids, 3);
    assert_true(c.prompt_ids[0] == 256 && c.prompt_ids[1] == 11 && c.prompt_ids[2] == 22);
    assert_int_equal(c.max_new_tokens, 5);
    assert_true(c.temperature == 0.0);
    assert_int_equal(c.top_k, 0);
    assert_true(c.n_layer == 2 && c.n_head == 2 && c.d_model == 32 && c.d_ff == 100);
    assert_true(c.vocab_size == 300 && c.seq_len == 16);
    assert_true(c.top_k_moe == 2 && c.moe_every == 1 && c.capacity_factor == 1.25);
    assert_true(c.router_noise == 0.0 && c.aux_loss_coef == 0.01 && c.z_loss_coef == 0.001);
    assert_true(c.dp == 2 && c.tp == 2 && c.pp == 3 && c.ep == 1);
    assert_string_equal(c.schedule, "gpipe");
    assert_true(c.virtual_stages == 1 && c.zero_stage == 0 && c.bucket_mb == 4.5);
    assert_string_equal(c.recompute, "full");
    assert_int_equal(c.recompute_layers, 1);
    assert_string_equal(c.bind, "none");
    assert_true(c.max_steps == 0 && c.global_batch == 16 && c.micro_batch == 2);
    assert_true(c.lr == 1e-3 && c.min_lr == 1e-5 && c.warmup_steps == 10);
    assert_string_equal(c.lr_schedule, "wsd");
    assert_true(c.decay_fraction == 1.0 && c.weight_decay == 0.0);
    assert_true(c.beta1 == 0.0 && c.beta2 == 0.999 && c.eps == 1e-6 && c.grad_clip == 0.0);
    assert_string_equal(c.precision, "fp32");
    assert_string_equal(c.on_anomaly, "abort");
    assert_int_equal(c.inject_nan_step, 3);
    assert_string_equal(c.train_files, "a.bin b.bin");
    assert_string_equal(c.val_files, "v.bin");
    assert_true(c.shuffle);
    assert_true(c.val_every == 10 && c.val_batches == 2);
    assert_string_equal(c.tokenizer, "gpt2");
    assert_string_equal(c.data_format, "nanogpt");
    assert_string_equal(c.ckpt_dir, "ck");
    assert_true(c.ckpt_every == 50 && c.ckpt_keep == 1 && c.timeout_s == 30.5);
    assert_true(c.io_timeout_s == 7200 && c.ckpt_overwrite && !c.save_weights);
    assert_true(c.striping_factor == 4 && c.striping_unit == 1048576);
    assert_string_equal(c.resume, "auto");
    assert_true(c.log_every == 10 && !c.jsonl && !c.tensorboard && c.peak_flops == 1.2e14 && !c.profile);
    assert_string_equal(c.papi_events, "");
    config_destroy(&c);
}

static void names_and_choices_are_case_insensitive(void **state) {
    (void)state;
    config_t c;
    parse_ok("&MODEL N_Layer = 3 /\n&Run MODE = 'TRAIN', Name = 'KeepCase' /\n&TRAIN LR_Schedule = 'WSD' /\n"
             "&data Train_Files = 'x.bin', Format = 'NanoGPT' /\n",
             &c);
    assert_int_equal(c.n_layer, 3);
    assert_string_equal(c.mode, "train");      /* choices stored canonical */
    assert_string_equal(c.lr_schedule, "wsd");
    assert_string_equal(c.data_format, "nanogpt");
    assert_string_equal(c.name, "KeepCase");   /* free text keeps its case */
    config_destroy(&c);
}

static void integer_for_real_key_and_fortran_d_exponent_are_accepted(void **state) {
    (void)state;
    config_t c;
    parse_ok("&train lr = 1, min_lr = 3.0d-4 /\n&checkpoint timeout_s = 60 /\n" DATA, &c);
    assert_true(c.lr == 1.0);
    assert_true(c.min_lr == 3.0e-4);
    assert_true(c.timeout_s == 60.0);
    config_destroy(&c);
}

static void comments_strings_with_quotes_and_prose_between_groups(void **state) {
    (void)state;
    config_t c;
    parse_ok("Run notes: tiny test. Text outside groups is ignored.\n"
             "&run ! the run group\n"
             "  name = 'bob''s run' ! doubled quote\n"
             "  out_dir = \"it's here\"\n"
             "/\n" DATA,
             &c);
    assert_string_equal(c.name, "bob's run");
    assert_string_equal(c.out_dir, "it's here");
    config_destroy(&c);
}

static void padded_vocab_rounds_up_to_a_multiple_of_128(void **state) {
    (void)state;
    config_t c;
    config_defaults(&c);
    assert_int_equal(config_padded_vocab(&c), 50304);
    c.vocab_size = 128;
    assert_int_equal(config_padded_vocab(&c), 128);
    c.vocab_size = 1;
    assert_int_equal(config_padded_vocab(&c), 128);
    c.vocab_size = 129;
    assert_int_equal(config_padded_vocab(&c), 256);
}

/* ---- errors in one key -------------------------------------------------------------------- */

/* A repeat count is checked against what its key holds before the parser copies anything:
 * `prompt = 100000*'<40 kB>'` was 4 GB of copies (exit 3, or a crash under a memory limit) before
 * "expected one value". Run under an address-space limit of what the process maps + 1 GiB. */
static void repeat_count_is_checked_against_the_key_before_it_is_expanded(void **state) {
    (void)state;
    struct rlimit old, lim;
    assert_int_equal(getrlimit(RLIMIT_AS, &old), 0);
    long pages = 0;
    FILE *f = fopen("/proc/self/statm", "r");
    if (f && fscanf(f, "%ld", &pages) != 1) pages = 0;
    if (f) fclose(f);
    lim = old;
    rlim_t want = (rlim_t)pages * (rlim_t)sysconf(_SC_PAGESIZE) + ((rlim_t)1 << 30);
    if (pages > 0 && (old.rlim_max == RLIM_INFINITY || want <= old.rlim_max)) lim.rlim_cur = want;
    assert_int_equal(setrlimit(RLIMIT_AS, &lim), 0);
    enum { LEN = 40000 };
    char *text = malloc(LEN + 256);
    assert_non_null(text);
    int n = snprintf(text, 64, "&run\n  prompt = 100000*'");
    memset(text + n, 'x', LEN);
    snprintf(text + n + LEN, 200, "'\n/\n%s", DATA);
    EXPECT_ERROR(text, PATH ":2:12: &run prompt: expected one value, got 100000 values (the repeat count "
                       "'100000*'), refused before making them");
    free(text);
    setrlimit(RLIMIT_AS, &old);
    EXPECT_ERROR("&run prompt_ids = 1, 1024*7 /\n" DATA,
                 PATH ":1:22: &run prompt_ids: at most 1024 values allowed, got 1025 (the repeat count "
                 "'1024*'), refused before making them");
    EXPECT_ERROR("&train max_steps = 2*10 /\n" DATA,
                 PATH ":1:20: &train max_steps: expected one value, got 2 values (the repeat count "
                 "'2*'), refused before making them");
    /* within what the key holds: expanded as always */
    config_t c;
    parse_ok("&run prompt_ids = 3*7, 1 /\n" DATA, &c);
    assert_int_equal(c.n_prompt_ids, 4);
    assert_int_equal(c.prompt_ids[2], 7);
    config_destroy(&c);
}

static void unknown_key_lists_valid_keys_and_suggests_the_closest(void **state) {
    (void)state;
    EXPECT_ERROR("&model\n  n_layer = 2\n  n_layers = 4\n/",
                 PATH ":3:3: &model unknown key 'n_layers' (valid keys: n_layer, n_head, d_model, d_ff, vocab_size,");
    EXPECT_ERROR("&model\n  n_layers = 4\n/", "collapse_steps); did you mean 'n_layer'?");
    EXPECT_ERROR("&train learning_rate = 1 /", PATH ":1:8: &train unknown key 'learning_rate' (valid keys: max_steps,");
}

static void key_in_the_wrong_group_names_its_group(void **state) {
    (void)state;
    EXPECT_ERROR("&model lr = 1e-3 /", PATH ":1:8: &model unknown key 'lr' (valid keys: n_layer,");
    EXPECT_ERROR("&model lr = 1e-3 /", "collapse_steps); 'lr' belongs in &train");
}

static void unknown_group_lists_valid_groups_and_suggests_the_closest(void **state) {
    (void)state;
    EXPECT_ERROR("\n\n&modle n_layer = 2 /",
                 PATH ":3:1: unknown group '&modle' (valid groups: &run, &model, &parallel, &train, &data, "
                      "&checkpoint, &log, &stage); did you mean '&model'?");
    const char *msg = parse_error("&optimizer lr = 1 /");
    assert_true(strstr(msg, "unknown group '&optimizer'") != NULL);
    assert_null(strstr(msg, "did you mean"));
}

static void wrong_types_name_expected_and_given(void **state) {
    (void)state;
    EXPECT_ERROR("&train\n  lr = 'fast'\n/", PATH ":2:8: &train lr: expected a real number, got string 'fast'");
    EXPECT_ERROR("&model n_layer = 2.5 /", PATH ":1:18: &model n_layer: expected an integer, got real 2.5");
    EXPECT_ERROR("&model n_layer = 1d1 /", "&model n_layer: expected an integer, got real 1d1");
    EXPECT_ERROR("&run name = 5 /", PATH ":1:13: &run name: expected a string in quotes, got integer 5");
    EXPECT_ERROR("&run seed = .true. /", "&run seed: expected an integer, got logical .true.");
    EXPECT_ERROR("&data shuffle = 1 /", "&data shuffle: expected a logical (.true. or .false.), got integer 1");
    EXPECT_ERROR("&data shuffle = 'yes' /", "&data shuffle: expected a logical (.true. or .false.), got string 'yes'");
    EXPECT_ERROR("&run prompt_ids = 1, 'two' /", PATH ":1:22: &run prompt_ids: expected an integer, got string 'two'");
}

static void array_for_a_scalar_key_is_refused(void **state) {
    (void)state;
    EXPECT_ERROR("&train lr = 1e-3, 2e-3 /", PATH ":1:19: &train lr: expected one value, got 2 values");
    EXPECT_ERROR("&run name = 'a' 'b' /", "&run name: expected one value, got 2 values");
}

static void too_many_prompt_ids_is_refused(void **state) {
    (void)state;
    EXPECT_ERROR("&run prompt_ids = 1025*1 /", "&run prompt_ids: at most 1024 values allowed, got 1025");
}

static void string_longer_than_field_is_refused(void **state) {
    (void)state;
    char text[512];
    char long_name[301];
    memset(long_name, 'a', 300);
    long_name[300] = '\0';
    snprintf(text, sizeof text, "&run name = '%s' /", long_name);
    EXPECT_ERROR(text, PATH ":1:13: &run name: string is 300 characters long; at most 255 allowed");
    /* exactly CFG_STR - 1 fits */
    long_name[CFG_STR - 1] = '\0';
    snprintf(text, sizeof text, "&run name = '%s' /\n" DATA, long_name);
    config_t c;
    parse_ok(text, &c);
    assert_int_equal(strlen(c.name), CFG_STR - 1);
    config_destroy(&c);
}

static void value_not_in_choices_lists_the_choices(void **state) {
    (void)state;
    EXPECT_ERROR("&run\n  mode = 'fit'\n/", PATH ":2:10: &run mode: 'fit' is not one of 'train', 'eval', 'generate'");
    EXPECT_ERROR("&run device = 'tpu' /", "&run device: 'tpu' is not one of 'cpu'");
    EXPECT_ERROR("&parallel schedule = 'zb' /", "&parallel schedule: 'zb' is not one of '1f1b', 'gpipe'");
    EXPECT_ERROR("&parallel recompute = 'all' /",
                 "&parallel recompute: 'all' is not one of 'none', 'selective', 'full'");
    EXPECT_ERROR("&data format = 'npy' /", "&data format: 'npy' is not one of 'auto', 'llmc', 'nanogpt'");
    EXPECT_ERROR("&train lr_schedule = 'step' /",
                 "&train lr_schedule: 'step' is not one of 'cosine', 'constant', 'linear', 'wsd'");
    EXPECT_ERROR("&train precision = 'fp8' /", "&train precision: 'fp8' is not one of 'fp32', 'bf16', 'fp16'");
    /* loss scaling: fp16's keys refused with another precision, an impossible dynamic scaler */
    EXPECT_ERROR("&train precision = 'bf16', loss_scale_window = 10 /",
                 "&train loss_scale_window: loss scaling is for precision = 'fp16', but precision = 'bf16'");
    EXPECT_ERROR("&train hysteresis = 3 /",
                 "&train hysteresis: loss scaling is for precision = 'fp16', but precision = 'fp32' (default)");
    EXPECT_ERROR("&train precision = 'fp16', initial_loss_scale = 8, min_loss_scale = 16 /",
                 "&train min_loss_scale: min_loss_scale = 16 (line 1) must be <= initial_loss_scale = 8");
    EXPECT_ERROR("&train precision = 'fp16', loss_scale = -1 /", "&train loss_scale: must be in [0, 1e+30], got -1");
    EXPECT_ERROR("&train precision = 'fp16', hysteresis = 0 /", "&train hysteresis: must be >= 1, got 0");
    EXPECT_ERROR("&train on_anomaly = 'ignore' /",
                 "&train on_anomaly: 'ignore' is not one of 'warn', 'skip', 'rollback', 'abort'");
}

/* The anomaly policies: every detector's default and the two overrides ('' = the default),
 * each unknown name refused naming its key; the thresholds' bounds. */
static void anomaly_policies_are_checked_by_key(void **state) {
    (void)state;
    config_t c;
    parse_ok("&train on_anomaly = 'ROLLBACK', on_spike = 'abort' /\n" DATA, &c);
    assert_string_equal(c.on_anomaly, "rollback");
    assert_string_equal(c.on_spike, "abort");
    assert_string_equal(c.on_divergence, "");
    assert_int_equal(c.anomaly_window, 20);
    assert_true(c.spike_zscore == 6 && c.grad_explosion_ratio == 10);
    assert_int_equal(c.divergence_evals, 5);
    assert_int_equal(c.overflow_streak, 32);
    assert_int_equal(c.max_rollbacks, 3);
    assert_int_equal(c.inject_spike_step, -1);
    config_destroy(&c);
    EXPECT_ERROR("&train on_spike = 'rewind' /",
                 "&train on_spike: 'rewind' is not one of '', 'warn', 'skip', 'rollback', 'abort'");
    EXPECT_ERROR("&train on_divergence = 'stop' /",
                 "&train on_divergence: 'stop' is not one of '', 'warn', 'skip', 'rollback', 'abort'");
    EXPECT_ERROR("&train anomaly_window = 1 /", "&train anomaly_window: must be in [2, 256], got 1");
    EXPECT_ERROR("&train anomaly_window = 257 /", "&train anomaly_window: must be in [2, 256], got 257");
    EXPECT_ERROR("&train spike_zscore = -1 /", "&train spike_zscore: must be in [0, 1e+30], got -1");
    EXPECT_ERROR("&train grad_explosion_ratio = 0.5 /\n" DATA,
                 PATH ":1:8: &train grad_explosion_ratio: must be 0 (off) or above 1 (a multiple of the median gradient "
                 "norm), got 0.5");
    EXPECT_ERROR("&train max_rollbacks = -1 /", "&train max_rollbacks: must be >= 0, got -1");
    EXPECT_ERROR("&train inject_spike_step = -2 /", "&train inject_spike_step: must be >= -1, got -2");
}

/* Each bound of the schema, with the value on its wrong side and the message it must give. */
static void every_range_bound_is_enforced_with_its_message(void **state) {
    (void)state;
    static const struct { const char *text, *message; } cases[] = {
        {"&train\n  max_steps = -5\n/", PATH ":2:15: &train max_steps: must be >= 0, got -5"},
        {"&run seed = -1 /", "&run seed: must be >= 0, got -1"},
        {"&run prompt_ids = 3, -1 /", PATH ":1:22: &run prompt_ids: must be >= 0, got -1"},
        {"&run max_new_tokens = 0 /", "&run max_new_tokens: must be in [1, 2147482623], got 0"},
        {"&run temperature = -0.5 /", "&run temperature: must be >= 0, got -0.5"},
        {"&run top_k = -1 /", "&run top_k: must be >= 0, got -1"},
        {"&model n_layer = 0 /", "&model n_layer: must be in [1, 1024], got 0"},
        {"&model n_head = 0 /", "&model n_head: must be >= 1, got 0"},
        {"&model d_model = 0 /", "&model d_model: must be >= 1, got 0"},
        {"&model d_ff = -1 /", "&model d_ff: must be >= 0, got -1"},
        {"&model vocab_size = 0 /", "&model vocab_size: must be in [1, 2147483520], got 0"},
        {"&model seq_len = 0 /", "&model seq_len: must be in [1, 2147483646], got 0"},
        {"&model dropout = 1.0 /", "&model dropout: must be in [0, 1), got 1.0"},
        {"&model n_experts = -1 /", "&model n_experts: must be >= 0, got -1"},
        {"&model top_k = 0 /", "&model top_k: must be >= 1, got 0"},
        {"&model moe_every = 0 /", "&model moe_every: must be >= 1, got 0"},
        {"&model capacity_factor = -1 /", "&model capacity_factor: must be in [0, 1e+06], got -1"},
        {"&model router_noise = -1 /", "&model router_noise: must be in [0, 1000], got -1"},
        {"&model aux_loss_coef = -1e-3 /", "&model aux_loss_coef: must be in [0, 1000], got -1e-3"},
        {"&model z_loss_coef = -1 /", "&model z_loss_coef: must be in [0, 1000], got -1"},
        {"&parallel dp = 0 /", "&parallel dp: must be >= 1, got 0"},
        {"&parallel tp = 0 /", "&parallel tp: must be >= 1, got 0"},
        {"&parallel pp = -2 /", "&parallel pp: must be >= 1, got -2"},
        {"&parallel ep = 0 /", "&parallel ep: must be >= 1, got 0"},
        {"&parallel virtual_stages = 0 /", "&parallel virtual_stages: must be >= 1, got 0"},
        {"&parallel zero_stage = 4 /", "&parallel zero_stage: must be in [0, 3], got 4"},
        {"&parallel zero_stage = -1 /", "&parallel zero_stage: must be in [0, 3], got -1"},
        {"&parallel bucket_mb = 0 /", "&parallel bucket_mb: must be in (0, 1e+06], got 0"},
        {"&parallel recompute_layers = -2 /", "&parallel recompute_layers: must be >= -1, got -2"},
        {"&train global_batch = -8 /", "&train global_batch: must be >= 0, got -8"},
        {"&train micro_batch = -1 /", "&train micro_batch: must be >= 0, got -1"},
        {"&train micro_batch = 0 /", "&train micro_batch: micro_batch = 0 (the largest that fits the memory "
         "limit) needs a global_batch that dp = 1 divides; global_batch = 0 (default)"},
        {"&train micro_batch = 0, global_batch = 9 /\n&parallel dp = 2 /",
         "needs a global_batch that dp = 2 divides; global_batch = 9 (line 1)"},
        {"&run memory_limit_gb = -1 /", "&run memory_limit_gb: must be in [0, 1e+09], got -1"},
        {"&train lr = 0 /", "&train lr: must be > 0, got 0"},
        {"&train min_lr = -1e-5 /", "&train min_lr: must be >= 0, got -1e-5"},
        {"&train warmup_steps = -1 /", "&train warmup_steps: must be >= 0, got -1"},
        {"&train decay_fraction = 0 /", "&train decay_fraction: must be in (0, 1], got 0"},
        {"&train decay_fraction = 1.5 /", "&train decay_fraction: must be in (0, 1], got 1.5"},
        {"&train weight_decay = -0.1 /", "&train weight_decay: must be >= 0, got -0.1"},
        {"&train beta1 = 1 /", "&train beta1: must be in [0, 1), got 1"},
        {"&train beta2 = 1.0 /", "&train beta2: must be in [0, 1), got 1.0"},
        {"&train beta2 = -0.1 /", "&train beta2: must be in [0, 1), got -0.1"},
        {"&train eps = 0 /", "&train eps: must be > 0, got 0"},
        {"&train grad_clip = -1 /", "&train grad_clip: must be >= 0, got -1"},
        {"&train inject_nan_step = -2 /", "&train inject_nan_step: must be >= -1, got -2"},
        {"&data val_every = -1 /", "&data val_every: must be >= 0, got -1"},
        {"&data val_batches = 0 /", "&data val_batches: must be >= 1, got 0"},
        {"&checkpoint every = -1 /", "&checkpoint every: must be >= 0, got -1"},
        {"&checkpoint keep = 0 /", "&checkpoint keep: must be >= 1, got 0"},
        {"&checkpoint timeout_s = 0 /", "&checkpoint timeout_s: must be in [0.001, 1e+09], got 0 (the watchdog"},
        {"&checkpoint io_timeout_s = -1 /", "&checkpoint io_timeout_s: must be in [0.001, 1e+09], got -1"},
        {"&log every = 0 /", "&log every: must be >= 1, got 0"},
        {"&log peak_flops = -1 /", "&log peak_flops: must be in [0, 1e+18], got -1"},
    };
    for (size_t i = 0; i < sizeof cases / sizeof cases[0]; i++) {
        const char *got = parse_error(cases[i].text);
        if (!strstr(got, cases[i].message))
            fail_msg("case %zu: %s\n  got:      %s\n  expected: %s", i, cases[i].text, got, cases[i].message);
    }
}

/* Path keys expand ${NAME} and ${NAME:-default} once; a result that holds '${' again (a nested
 * default, a variable whose value has one) is refused, since the effective configuration, echoed
 * and stored in checkpoints, would be expanded a second time when read (the namelist fuzzer
 * found a nested default whose echo did not parse). */
static void path_variables_expand_once(void **state) {
    (void)state;
    config_t cfg;
    setenv("LLMT_TEST_ROOT", "/scratch/x", 1);
    unsetenv("LLMT_TEST_UNSET");
    parse_ok("&data train_files = '${LLMT_TEST_ROOT}/t_*.bin', "
             "val_files = '${LLMT_TEST_UNSET:-data}/v_*.bin' /", &cfg);
    assert_string_equal(cfg.train_files, "/scratch/x/t_*.bin");
    assert_string_equal(cfg.val_files, "data/v_*.bin");
    config_destroy(&cfg);
    EXPECT_ERROR("&data train_files = '${LLMT_TEST_UNSET:-a${LLMT_TEST_UNSET:-b}/t.bin' /",
                 PATH ":1:7: &data train_files: '${LLMT_TEST_UNSET:-a${LLMT_TEST_UNSET:-b}/t.bin' "
                 "expands to 'a${LLMT_TEST_UNSET:-b/t.bin', which holds '${' again");
    setenv("LLMT_TEST_ROOT", "${HOME}", 1);
    EXPECT_ERROR("&data train_files = '${LLMT_TEST_ROOT}/t.bin' /", "which holds '${' again");
    EXPECT_ERROR("&data train_files = '${LLMT_TEST_ROOT/t.bin' /", "'${' without a closing '}'");
    EXPECT_ERROR("&data train_files = '${LLMT_TEST_UNSET}/t.bin' /",
                 "the environment variable LLMT_TEST_UNSET in '${LLMT_TEST_UNSET}/t.bin' is not set");
    unsetenv("LLMT_TEST_ROOT");
}

static void integer_beyond_32_bits_is_refused_for_int_keys(void **state) {
    (void)state;
    EXPECT_ERROR("&train max_steps = 3000000000 /", PATH ":1:20: &train max_steps: 3000000000 does not fit in a 32-bit integer");
    config_t c;
    parse_ok("&run seed = 9000000000 /\n" DATA, &c); /* seed is 64-bit */
    assert_true(c.seed == 9000000000LL);
    config_destroy(&c);
}

/* &model dropout sets the three dropout rates; each one given itself wins, wherever it stands. */
static void dropout_sets_the_three_rates_unless_given(void **state) {
    (void)state;
    config_t c;
    parse_ok("&model attn_dropout = 0.2, dropout = 0.1 /\n" DATA, &c);
    assert_true(c.attn_dropout == 0.2 && c.resid_dropout == 0.1 && c.embd_dropout == 0.1);
    config_destroy(&c);
    parse_ok("&model embd_dropout = 0.3 /\n" DATA, &c);
    assert_true(c.attn_dropout == 0.0 && c.resid_dropout == 0.0 && c.embd_dropout == 0.3);
    config_destroy(&c);
    EXPECT_ERROR("&model resid_dropout = 1 /", "&model resid_dropout: must be in [0, 1), got 1");
    EXPECT_ERROR("&train label_smoothing = 1.5 /", "&train label_smoothing: must be in [0, 1], got 1.5");
    EXPECT_ERROR("&model init = 'orthogonal' /", "&model init: 'orthogonal'");
}

/* Item 7: every key (or value) of a later version is refused from the one marker in the key
 * table, pointing at the value, and its default is accepted (so echoes parse back). */
static void unimplemented_features_are_refused_not_ignored(void **state) {
    (void)state;
    static const struct { const char *set, *dflt, *message; } cases[] = {
        {"&parallel virtual_stages = 2 /", "&parallel virtual_stages = 1 /",
         "needs schedule = 'interleaved' (got '1f1b'), or set virtual_stages = 1"},
        {"&parallel schedule = 'zb-h1', virtual_stages = 2 /", "&parallel schedule = 'zb-h1' /",
         "needs schedule = 'interleaved' (got 'zb-h1'), or set virtual_stages = 1"},
#ifndef LLMT_CUDA /* a CPU-only build refuses the CUDA backend, naming the build that has it */
        {"&run device = 'cuda' /", "&run device = 'cpu' /",
         PATH ":1:15: &run device: 'cuda': this llmtrain was built without CUDA (build it with make "
              "CUDA=1, see INSTALL); use 'cpu'"},
#endif
    };
    for (size_t i = 0; i < sizeof cases / sizeof cases[0]; i++) {
        char text[256];
        snprintf(text, sizeof text, "%s\n" DATA, cases[i].set);
        const char *got = parse_error(text);
        if (!strstr(got, cases[i].message))
            fail_msg("case %zu: %s\n  got:      %s\n  expected: %s", i, cases[i].set, got, cases[i].message);
        snprintf(text, sizeof text, "%s\n" DATA, cases[i].dflt);
        config_t c;
        parse_ok(text, &c);
        config_destroy(&c);
    }
#ifdef LLMT_CUDA /* make CUDA=1: the value is accepted */
    config_t c;
    parse_ok("&run device = 'cuda' /\n" DATA, &c);
    assert_string_equal(c.device, "cuda");
    config_destroy(&c);
#endif
}

/* Mixture of Experts: the keys reach their fields (d_ff_expert 0 = d_ff), and the cross-key
 * rules name the key: top_k > n_experts, moe_every > n_layer, ep not dividing dp or
 * n_experts. */
static void moe_keys_are_parsed_and_checked(void **state) {
    (void)state;
    config_t c;
    parse_ok("&model n_experts = 8, top_k = 2, moe_every = 2, capacity_factor = 0, drop_policy = 'position'"
             ", n_shared_experts = 1, router = 'mlp', router_noise = 1 /\n&parallel dp = 4, ep = 2 /\n" DATA, &c);
    assert_int_equal(c.n_experts, 8);
    assert_int_equal(c.d_ff_expert, c.d_ff);
    assert_true(c.capacity_factor == 0 && c.router_noise == 1 && c.ep == 2 && c.n_shared_experts == 1);
    assert_string_equal(c.drop_policy, "position");
    assert_string_equal(c.router, "mlp");
    config_destroy(&c);
    static const struct { const char *text, *message; } bad[] = {
        {"&model n_experts = 4, top_k = 5 /", PATH ":1:23: &model top_k: top_k = 5 (line 1) must be <= n_experts = 4"},
        {"&model n_experts = 4, moe_every = 13 /", "&model moe_every: moe_every = 13 (line 1) must be <= n_layer = 12"},
        {"&model n_experts = 4 /\n&parallel dp = 3, ep = 2 /", "&parallel ep: ep = 2 (line 2) must divide dp = 3"},
        {"&model n_experts = 6 /\n&parallel dp = 4, ep = 4 /", "&parallel ep: ep = 4 (line 2) must divide n_experts = 6"},
        {"&parallel dp = 2, ep = 2 /", "&parallel ep: ep = 2 (line 1) needs a Mixture-of-Experts model, but n_experts = 0 (default)"},
        {"&model drop_policy = 'random' /", "&model drop_policy: 'random' is not one of 'probs', 'position'"},
        {"&model router = 'hash' /", "&model router: 'hash' is not one of 'linear', 'mlp'"},
    };
    for (size_t i = 0; i < sizeof bad / sizeof bad[0]; i++) {
        char text[256];
        snprintf(text, sizeof text, "%s\n" DATA, bad[i].text);
        const char *got = parse_error(text);
        if (!strstr(got, bad[i].message))
            fail_msg("case %zu: %s\n  got:      %s\n  expected: %s", i, bad[i].text, got, bad[i].message);
    }
}

/* &log profile_steps: 'a:b' with 1 <= a <= b, only with profile = .true.; the window, the PAPI
 * list (checked against the library at startup) and the carbon intensity reach their fields;
 * straggler_ratio is 0 or above 1. */
static void profile_keys_are_parsed_and_checked(void **state) {
    (void)state;
    config_t c;
    parse_ok("&log profile = .true., profile_steps = '3:7', papi_events = 'PAPI_TOT_INS,PAPI_TOT_CYC'"
             ", carbon_intensity = 350 /\n" DATA, &c);
    assert_true(c.profile && c.profile_first == 3 && c.profile_last == 7 && c.carbon_intensity == 350);
    assert_string_equal(c.papi_events, "PAPI_TOT_INS,PAPI_TOT_CYC");
    config_destroy(&c);
    parse_ok("&log profile = .true. /\n" DATA, &c);
    assert_true(c.profile_first == 0 && c.profile_last == 0 && c.carbon_intensity == 0);
    config_destroy(&c);
    static const char *bad[] = {"'3'", "'3:'", "'0:2'", "'5:4'", "'a:b'", "'2:3x'", "'-1:3'", "''x"};
    for (size_t i = 0; i + 1 < sizeof bad / sizeof bad[0]; i++) {
        char text[256];
        snprintf(text, sizeof text, "&log profile = .true., profile_steps = %s /\n" DATA, bad[i]);
        const char *got = parse_error(text);
        if (!strstr(got, PATH ":1:24: &log profile_steps: ") ||
            !strstr(got, "is not a step range 'a:b' with 1 <= a <= b (steps count from 1)"))
            fail_msg("%s\n  got: %s", bad[i], got);
    }
    EXPECT_ERROR("&log profile_steps = '1:2' /\n" DATA,
                 PATH ":1:6: &log profile_steps: the timeline's steps, but profile = .false.; set "
                 "profile = .true. or remove the key");
    EXPECT_ERROR("&log carbon_intensity = -1 /\n" DATA,
                 PATH ":1:25: &log carbon_intensity: must be in [0, 100000], got -1 (gCO2/kWh)");
    /* &log straggler_ratio: default 2, 0 = off, else above 1 (train/straggler.h) */
    parse_ok("&log straggler_ratio = 0 /\n" DATA, &c);
    assert_true(c.straggler_ratio == 0);
    config_destroy(&c);
    parse_ok("&log /\n" DATA, &c);
    assert_true(c.straggler_ratio == 2);
    config_destroy(&c);
    EXPECT_ERROR("&log straggler_ratio = -1 /\n" DATA,
                 PATH ":1:24: &log straggler_ratio: must be in [0, 1e+06], got -1 (a rank's busy time "
                 "over its peers' median)");
    EXPECT_ERROR("&log straggler_ratio = 1 /\n" DATA,
                 PATH ":1:6: &log straggler_ratio: must be 0 (off) or above 1 (a multiple of the "
                 "median busy time of a rank's peers), got 1");
}

/* ---- bounds with reasons, and sizes derived from several keys (item 5) --------------------- */

/* Float keys converted to integers (bucket_mb to floats, the timeouts to nanoseconds) and ints
 * whose sums or products are 32-bit: each bound, its reason, and a value just inside. */
static void converted_and_summed_keys_are_bounded_with_the_reason(void **state) {
    (void)state;
    static const struct { const char *text, *message, *ok; } cases[] = {
        {"&model vocab_size = 2147483521 /",
         PATH ":1:21: &model vocab_size: must be in [1, 2147483520], got 2147483521 (the padded vocabulary, "
         "vocab_size rounded up to a multiple of 128, is a 32-bit integer",
         "&model vocab_size = 128256, d_model = 64, n_head = 4 /"},
        {"&model seq_len = 2147483647 /",
         "&model seq_len: must be in [1, 2147483646], got 2147483647 (a window of seq_len + 1 tokens is counted",
         "&model seq_len = 2048 /"},
        {"&model n_layer = 1025 /", "&model n_layer: must be in [1, 1024], got 1025 (the pipeline layer partition",
         "&model n_layer = 1024, d_model = 64, n_head = 4 /"},
        {"&parallel bucket_mb = 1e30 /",
         "&parallel bucket_mb: must be in (0, 1e+06], got 1e30 (the bucket size is converted to a count of floats)",
         "&parallel bucket_mb = 1e6 /"},
        {"&checkpoint timeout_s = 1e-12 /",
         PATH ":1:25: &checkpoint timeout_s: must be in [0.001, 1e+09], got 1e-12 (the watchdog counts nanoseconds: "
              "below 1 ms every wait would time out)",
         "&checkpoint timeout_s = 0.001 /"},
        {"&checkpoint timeout_s = 1e10 /", "&checkpoint timeout_s: must be in [0.001, 1e+09], got 1e10",
         "&checkpoint timeout_s = 1e9 /"},
        {"&checkpoint io_timeout_s = 1e-12 /", "&checkpoint io_timeout_s: must be in [0.001, 1e+09], got 1e-12",
         "&checkpoint io_timeout_s = 86400 /"},
        {"&checkpoint io_timeout_s = 1e19 /", "&checkpoint io_timeout_s: must be in [0.001, 1e+09], got 1e19",
         "&checkpoint io_timeout_s = 0.5 /"},
        {"&log peak_flops = 1e30 /", "&log peak_flops: must be in [0, 1e+18], got 1e30 (FLOP/s of one rank)",
         "&log peak_flops = 1e15 /"},
        {"&run max_new_tokens = 2147483000 /",
         "&run max_new_tokens: must be in [1, 2147482623], got 2147483000 (the prompt and the new tokens",
         "&run max_new_tokens = 2147482623 /"},
    };
    for (size_t i = 0; i < sizeof cases / sizeof cases[0]; i++) {
        char text[256];
        snprintf(text, sizeof text, "%s\n" DATA, cases[i].text);
        const char *got = parse_error(text);
        if (!strstr(got, cases[i].message))
            fail_msg("case %zu: %s\n  got:      %s\n  expected: %s", i, cases[i].text, got, cases[i].message);
        snprintf(text, sizeof text, "%s\n" DATA, cases[i].ok);
        config_t c;
        parse_ok(text, &c);
        config_destroy(&c);
    }
}

/* Products that overflow 32 bits (or a rank's memory) are refused naming the keys and numbers,
 * never wrapped: each case fails without its check (it would parse). */
static void derived_sizes_are_refused_naming_keys_and_numbers(void **state) {
    (void)state;
    static const struct { const char *text, *message; } cases[] = {
        {"&parallel\n  dp = 2000000000, tp = 4\n/\n&train micro_batch = 1, global_batch = 2000000000 /",
         PATH ":2:3: &parallel dp: dp * tp * pp = 2000000000 * 4 * 1 = 8000000000 ranks exceed 2147483647 (MPI counts "
              "ranks in 32-bit integers) (&parallel dp: line 2, &parallel tp: line 2, &parallel pp: default)"},
        {"&model d_model = 800000000, n_head = 1, d_ff = 1 /",
         "&model d_model: 3 * d_model = 2400000000 (the width of a qkv row) exceeds 2147483647"},
        {"&train\n  micro_batch = 3000000\n/",
         PATH ":2:3: &train micro_batch: micro_batch * seq_len = 3000000 * 1024 = 3072000000 tokens per micro-batch "
              "exceed 2147483647 (the kernels count them in 32-bit integers) (&train micro_batch: line 2, &model "
              "seq_len: default)"},
        {"&train micro_batch = 100000000 /\n&model seq_len = 1, n_head = 32, d_model = 64 /",
         "&train micro_batch: micro_batch * n_head = 100000000 * 32 = 3200000000 attention heads per micro-batch exceed "
         "2147483647"},
        {"&train micro_batch = 1024 /\n&model d_model = 4096, n_head = 32 /",
         "&train micro_batch: micro_batch * seq_len * d_model = 1024 * 1024 * 4096 = 4294967296 activations per "
         "micro-batch exceed 2147483647 (the kernels take a micro-batch's rows and widths as 32-bit integers)"},
        {"&train micro_batch = 1, global_batch = 4000000 /\n&model d_model = 64, n_head = 4 /",
         "&train global_batch: global_batch * seq_len = 4000000 * 1024 = 4096000000 tokens per optimizer step exceed "
         "2147483647 (counted in 32-bit integers) (&train global_batch: line 1, &model seq_len: default)"},
        {"&train micro_batch = 1 /\n&parallel dp = 3000000 /\n&model d_model = 64, n_head = 4 /",
         "&train global_batch: global_batch * seq_len = 3000000 (micro_batch * dp) * 1024 = 3072000000 tokens per "
         "optimizer step exceed 2147483647 (counted in 32-bit integers) (&train global_batch: default, &model seq_len: "
         "default, &train micro_batch: line 1, &parallel dp: line 2)"},
        /* a vocabulary past the uint16 range is accepted; its wte counts, padded, in the bound */
        {"&model vocab_size = 100000000 /",
         "one rank needs at least 2.6 TiB (parameters, gradients and AdamW moments: 1.1 TiB; activations for "
         "micro_batch = 4, seq_len = 1024: 1.5 TiB), more than the 1 TiB llmtrain accepts per rank"},
        /* activations linear in seq_len (attention keeps no T x T matrix: kernels/ops.h) */
        {"&train micro_batch = 64 /\n&model seq_len = 8192, n_head = 32, d_model = 2048, n_layer = 24 /",
         "&train micro_batch: one rank needs at least 1.7 TiB (parameters, gradients and AdamW moments: 19.8 GiB; "
         "activations for micro_batch = 64, seq_len = 8192: 1.6 TiB), more than the 1 TiB llmtrain accepts per rank: "
         "use a smaller micro_batch or seq_len, a larger &parallel tp or pp"},
        {"&train micro_batch = 64 /\n&model seq_len = 8192, n_head = 32, d_model = 2048, n_layer = 24 /\n"
         "&parallel recompute = 'selective' /",
         "&train micro_batch: one rank needs at least 1.2 TiB (parameters, gradients and AdamW moments: 19.8 GiB; "
         "activations for micro_batch = 64, seq_len = 8192: 1.2 TiB), more than the 1 TiB llmtrain accepts per rank: "
         "use a smaller micro_batch or seq_len, a larger &parallel tp or pp, or &parallel recompute = 'full'"},
    };
    for (size_t i = 0; i < sizeof cases / sizeof cases[0]; i++) {
        char text[512];
        snprintf(text, sizeof text, "%s\n" DATA, cases[i].text);
        const char *got = parse_error(text);
        if (!strstr(got, cases[i].message))
            fail_msg("case %zu: %s\n  got:      %s\n  expected: %s", i, cases[i].text, got, cases[i].message);
    }
    /* just inside: the same shapes split further, or smaller, are accepted */
    static const char *const fits[] = {
        "&train micro_batch = 2000000 /\n&model d_model = 64, n_head = 4, seq_len = 1 /",
        /* more than 2^31 parameters on a rank (4.06e9, 2.42e9): 64-bit counts, chunked MPI calls */
        "&model n_layer = 1, d_model = 16384, n_head = 128 /",
        "&model n_layer = 96, d_model = 4096, n_head = 32 /\n&parallel pp = 2, tp = 4 /",
        "&model n_layer = 1, d_model = 16384, n_head = 128 /\n&parallel tp = 2 /",
        "&model n_layer = 96, d_model = 4096, n_head = 32 /\n&parallel pp = 4, tp = 4 /",
        "&train micro_batch = 2 /\n&model seq_len = 8192, n_head = 32, d_model = 2048, n_layer = 24 /",
        /* 32 x 8192 tokens: refused while attention kept B x NH x T x T probabilities (7 TiB) */
        "&train micro_batch = 32 /\n&model seq_len = 8192, n_head = 32, d_model = 2048, n_layer = 24 /",
        /* refused with selective (above): full keeps one block input per layer */
        "&train micro_batch = 64 /\n&model seq_len = 8192, n_head = 32, d_model = 2048, n_layer = 24 /\n"
        "&parallel recompute = 'full' /",
        "&train micro_batch = 1, global_batch = 2097151 /\n&model d_model = 64, n_head = 4 /",
    };
    for (size_t i = 0; i < sizeof fits / sizeof fits[0]; i++) {
        char text[512];
        snprintf(text, sizeof text, "%s\n" DATA, fits[i]);
        config_t c;
        parse_ok(text, &c);
        config_destroy(&c);
    }
}

static void padded_vocab_does_not_overflow_near_int_max(void **state) {
    (void)state;
    config_t c;
    config_defaults(&c);
    c.vocab_size = 2147483647; /* unvalidated (a tool's config): saturates, no signed overflow */
    int v = config_padded_vocab(&c);
    assert_true(v > 0 && v % 128 == 0);
    c.vocab_size = 65536;
    assert_int_equal(config_padded_vocab(&c), 65536);
    c.vocab_size = 2147483520; /* the largest valid: exactly a multiple of 128 */
    assert_int_equal(config_padded_vocab(&c), 2147483520);
    c.vocab_size = 128256; /* Llama 3 */
    assert_int_equal(config_padded_vocab(&c), 128256);
    c.vocab_size = 151646; /* Qwen 2 */
    assert_int_equal(config_padded_vocab(&c), 151680);
}

/* Moved from main.c's refuse_unimplemented: a cross-key check with the lines of both keys. */
static void generate_needs_pp_1(void **state) {
    (void)state;
    EXPECT_ERROR("&run mode = 'generate', prompt_ids = 1 /\n&parallel\n  pp = 2\n/",
                 PATH ":3:3: &parallel pp: mode = 'generate' (line 1) runs with pp = 1, got pp = 2 (line 3); weights "
                      "saved on any grid load there");
    config_t c;
    parse_ok("&run mode = 'generate', prompt_ids = 1 /\n&parallel tp = 2 /", &c);
    config_destroy(&c);
}

/* ZeRO-3 gathers the blocks the interleaved runner executes (train/zero.c): the combination is
 * accepted, resident or rotating; n_layer not divisible by pp * v is still refused with it. */
static void zero3_works_with_interleaved(void **state) {
    (void)state;
    const char *grid = "&model n_layer = 8 /\n&parallel dp = 2, pp = 2, schedule = 'interleaved', "
                       "virtual_stages = 2, zero_stage = 3, zero3_resident = %s /\n" DATA;
    const char *resident[] = {".false.", ".true."};
    for (int i = 0; i < 2; i++) {
        char text[300];
        snprintf(text, sizeof text, grid, resident[i]);
        config_t c;
        parse_ok(text, &c);
        assert_true(c.zero_stage == 3 && c.virtual_stages == 2 && c.zero3_resident == (i == 1));
        config_destroy(&c);
    }
    const char *got = parse_error("&model n_layer = 6 /\n&parallel dp = 2, pp = 2, schedule = "
                                  "'interleaved', virtual_stages = 2, zero_stage = 3 /\n" DATA);
    if (!strstr(got, "is not divisible by pp * virtual_stages = 4"))
        fail_msg("n_layer = 6, pp = 2, v = 2 with ZeRO-3: got %s", got);
}

static void val_every_needs_val_files(void **state) {
    (void)state;
    EXPECT_ERROR("&data\n  train_files = 'a.bin'\n  val_every = 25\n/",
                 PATH ":3:3: &data val_files: val_every = 25 (line 3) asks for validation, but val_files is not set; "
                      "set val_files = 'data/val_*.bin' or val_every = 0");
    config_t c;
    parse_ok("&data train_files = 'a.bin', val_every = 25, val_files = 'v.bin' /", &c);
    config_destroy(&c);
    parse_ok("&data train_files = 'a.bin', val_every = 0 /", &c);
    config_destroy(&c);
}

static void duplicate_group_and_duplicate_key_are_errors(void **state) {
    (void)state;
    EXPECT_ERROR("&train lr = 1 /\n&model n_layer = 2 /\n&train max_steps = 3 /",
                 PATH ":3:1: duplicate group '&train' (first opened at line 1)");
    EXPECT_ERROR("&train\n  lr = 1\n  LR = 2\n/", PATH ":3:3: &train lr: duplicate key (first set at line 2)");
}

static void syntax_errors_come_through_fatal_user_with_the_path(void **state) {
    (void)state;
    EXPECT_ERROR("&run name = 'abc\n/", PATH ":1:13: unterminated string: missing closing ' before end of line");
    EXPECT_ERROR("&run\n  name 'x'\n/", PATH ":2:8: missing '=' after key 'name' in group '&run' (found ''')");
    EXPECT_ERROR("&run name = 'x'\n", PATH ":1:1: group '&run' is not closed by '/' (reached end of file)");
    EXPECT_ERROR("&run name = x /", PATH ":1:13: unquoted word 'x' in the value of key 'name'");
    EXPECT_ERROR("&run prompt_ids(1) = 5 /", "indexed assignment 'prompt_ids(...)' is not supported");
}

/* ---- checks across keys ------------------------------------------------------------------- */

static void d_model_must_be_divisible_by_n_head_naming_both_lines(void **state) {
    (void)state;
    EXPECT_ERROR("&model\n  d_model = 100\n  n_head = 12\n/\n" DATA,
                 PATH ":2:3: &model d_model: d_model = 100 (line 2) must be divisible by n_head = 12 (line 3)");
    EXPECT_ERROR("&model n_head = 5 /\n" DATA,
                 PATH ":1:8: &model d_model: d_model = 768 (default) must be divisible by n_head = 5 (line 1)");
}

static void global_batch_must_be_a_multiple_of_micro_batch_times_dp(void **state) {
    (void)state;
    EXPECT_ERROR("&train\n  global_batch = 10\n  micro_batch = 2\n/\n&parallel dp = 2 /\n" DATA,
                 PATH ":2:3: &train global_batch: global_batch = 10 (line 2) must be a multiple of micro_batch * dp "
                      "= 2 * 2 = 4 (&train micro_batch: line 3, &parallel dp: line 5)");
    config_t c;
    parse_ok("&train global_batch = 16, micro_batch = 2 /\n&parallel dp = 2 /\n" DATA, &c);
    assert_int_equal(c.global_batch, 16);
    config_destroy(&c);
}

static void recompute_layers_must_not_exceed_n_layer(void **state) {
    (void)state;
    EXPECT_ERROR("&model n_layer = 4 /\n&parallel recompute = 'full', recompute_layers = 5 /\n" DATA,
                 PATH ":2:31: &parallel recompute_layers: recompute_layers = 5 (line 2) must be <= n_layer = 4 "
                      "(line 1); -1 recomputes every block");
    config_t c;
    parse_ok("&model n_layer = 4 /\n&parallel recompute = 'SELECTIVE', recompute_layers = 4 /\n" DATA, &c);
    assert_string_equal(c.recompute, "selective"); /* choices are matched case-insensitively */
    config_destroy(&c);
}

static void min_lr_must_not_exceed_lr(void **state) {
    (void)state;
    EXPECT_ERROR("&train\n  lr = 1e-4\n  min_lr = 1e-3\n/\n" DATA,
                 PATH ":3:3: &train min_lr: min_lr = 0.001 (line 3) must be <= lr = 0.0001 (line 2)");
    config_t c;
    parse_ok("&train lr = 1e-4, min_lr = 1e-4 /\n" DATA, &c); /* equal is fine */
    config_destroy(&c);
}

static void training_needs_train_files(void **state) {
    (void)state;
    EXPECT_ERROR("&run\n  mode = 'train'\n/",
                 PATH ":2:3: &data train_files: must be set when &run mode = 'train' (line 2), "
                      "e.g. train_files = 'data/train_*.bin'");
    EXPECT_ERROR("", PATH ":1:1: &data train_files: must be set when &run mode = 'train' (default)");
    EXPECT_ERROR("&run seed = 1 /\n&data\n  train_files = ''\n/", PATH ":3:3: &data train_files: must be set");
    config_t c;
    parse_ok("&run mode = 'eval' /", &c); /* eval and generate need no training data */
    config_destroy(&c);
}

static void generation_needs_at_least_one_prompt_id(void **state) {
    (void)state;
    EXPECT_ERROR("&run\n  mode = 'generate'\n/",
                 PATH ":2:3: &run prompt_ids: mode = 'generate' (line 2) needs at least one prompt id "
                      "(n_prompt_ids >= 1), e.g. prompt_ids = 50256");
    config_t c;
    parse_ok("&run mode = 'generate', prompt_ids = 7 /", &c);
    assert_int_equal(c.n_prompt_ids, 1);
    config_destroy(&c);
    EXPECT_ERROR("&run mode = 'generate', prompt = 'Once upon' /",
                 "&data tokenizer: a text prompt (&run prompt) needs a tokenizer file");
    parse_ok("&run mode = 'generate', prompt = 'Once upon' /\n&data tokenizer = 'x.tiktoken' /", &c);
    assert_string_equal(c.prompt, "Once upon");
    config_destroy(&c);
}

static void prompt_ids_must_be_below_vocab_size(void **state) {
    (void)state;
    EXPECT_ERROR("&run mode = 'generate'\n  prompt_ids = 1, 2, 300\n/\n&model vocab_size = 300 /",
                 PATH ":2:22: &run prompt_ids: id 300 must be < vocab_size = 300 (&model vocab_size: line 4)");
    EXPECT_ERROR("&run mode = 'generate', prompt_ids = 50257 /",
                 "&run prompt_ids: id 50257 must be < vocab_size = 50257 (&model vocab_size: default)");
}

/* ---- echo and round trip ------------------------------------------------------------------ */

static char *to_namelist(const config_t *c) {
    int n = config_to_namelist(c, NULL, 0);
    assert_true(n > 0);
    char *text = malloc((size_t)n + 1);
    assert_int_equal(config_to_namelist(c, text, n + 1), n);
    assert_int_equal((int)strlen(text), n);
    return text;
}

/* parse(to_namelist(c)) must give c back, field for field (text, overrides (compared as strings),
 * path and the provenance flags global_batch_derived and resume_given aside: the echo states
 * the effective batch and resume explicitly). */
static void assert_round_trip(config_t *c) {
    char *text = to_namelist(c);
    config_t back;
    parse_ok(text, &back);
    char *text_back = to_namelist(&back);
    if (strcmp(text, text_back) != 0) fail_msg("echo differs after a round trip:\n%s\n----\n%s", text, text_back);
    char *saved_text = c->text, *saved_back = back.text;
    char *saved_over = c->overrides, *saved_over_back = back.overrides;
    assert_string_equal(c->overrides, back.overrides);
    c->text = back.text = c->overrides = back.overrides = NULL;
    snprintf(back.source_path, sizeof back.source_path, "%s", c->source_path);
    back.global_batch_derived = c->global_batch_derived;
    back.resume_given = c->resume_given; /* the echo states resume explicitly too */
    /* where &data keys were set: positions in the text, not values */
    back.mixture_line = c->mixture_line, back.mixture_col = c->mixture_col;
    back.train_files_line = c->train_files_line, back.train_files_col = c->train_files_col;
    const config_positions_t where_back = back.where; /* likewise every key's (config_key_where) */
    back.where = c->where;
    if (memcmp(c, &back, sizeof *c) != 0) fail_msg("config differs after a round trip through:\n%s", text);
    back.where = where_back;
    c->text = saved_text;
    back.text = saved_back;
    c->overrides = saved_over;
    back.overrides = saved_over_back;
    config_destroy(&back);
    free(text);
    free(text_back);
}

static void to_namelist_round_trips_a_default_config(void **state) {
    (void)state;
    config_t c;
    parse_ok(DATA, &c);
    assert_round_trip(&c);
    config_destroy(&c);
}

static void to_namelist_round_trips_awkward_values(void **state) {
    (void)state;
    config_t c;
    parse_ok("&run name = 'it''s \"quoted\" ! not a comment', mode = 'generate', prompt_ids = 0 1 50256,\n"
             "     temperature = 0.1, seed = 9007199254740993 /\n"
             "&train lr = 3.0000000000000004e-4, min_lr = 1e-300, eps = 2.2250738585072014e-308 /\n"
             "&log peak_flops = 9.87654321e15, jsonl = F /\n"
             "&model d_ff = 1000 /\n&parallel bucket_mb = 0.30000000000000004 /\n"
             "&checkpoint io_timeout_s = 1.0000000000000002e-3, overwrite = T /\n",
             &c);
    assert_round_trip(&c);
    config_destroy(&c);
}

static void to_namelist_writes_valid_namelist_syntax(void **state) {
    (void)state;
    config_t c;
    parse_ok("&run name = 'a''b', prompt_ids = 5, 6 , mode='generate' /\n&data shuffle = T /", &c);
    char *text = to_namelist(&c);
    const char *expected[] = {"&run\n", "  name            = 'a''b'\n", "  prompt_ids      = 5, 6\n",
                              "  shuffle         = .true.\n", "  jsonl           = .true.\n",
                              "  tensorboard     = .true.\n", "  timeout_s       = 600.0\n",
                              "  lr              = 0.0006\n", "  d_ff            = 3072\n", "&log\n", "/\n"};
    for (size_t i = 0; i < sizeof expected / sizeof expected[0]; i++)
        if (!strstr(text, expected[i])) fail_msg("echo lacks '%s':\n%s", expected[i], text);
    free(text);
    config_destroy(&c);
}

static void to_namelist_is_snprintf_like_on_short_buffers(void **state) {
    (void)state;
    config_t c;
    config_defaults(&c);
    int n = config_to_namelist(&c, NULL, 0);
    char small[32];
    memset(small, 'x', sizeof small);
    assert_int_equal(config_to_namelist(&c, small, sizeof small), n);
    assert_int_equal((int)strlen(small), (int)sizeof small - 1); /* truncated and terminated */
}

static void empty_prompt_is_echoed_as_a_comment(void **state) {
    (void)state;
    config_t c;
    parse_ok(DATA, &c);
    char *text = to_namelist(&c);
    assert_non_null(strstr(text, "  ! prompt_ids: none given\n"));
    free(text);
    config_destroy(&c);
}

/* ---- config_load -------------------------------------------------------------------------- */

static void write_file(const char *path, const char *text, size_t len) {
    FILE *f = fopen(path, "wb");
    assert_non_null(f);
    assert_int_equal(fwrite(text, 1, len, f), len);
    fclose(f);
}

static void load_reads_broadcasts_and_keeps_text_and_path(void **state) {
    (void)state;
    char path[] = "/tmp/test_config_XXXXXX";
    int fd = mkstemp(path);
    assert_true(fd >= 0);
    close(fd);
    const char *text = "&model n_layer = 3 /\n" DATA;
    write_file(path, text, strlen(text));
    config_t c;
    if (setjmp(fatal_jump) != 0) fail_msg("unexpected error: %s", fatal_message);
    config_load(path, &c);
    assert_int_equal(c.n_layer, 3);
    assert_string_equal(c.text, text);
    assert_string_equal(c.source_path, path);
    config_destroy(&c);
    unlink(path);
}

static const char *load_error(const char *path) {
    config_t c;
    if (setjmp(fatal_jump) == 0) {
        config_load(path, &c);
        config_destroy(&c);
        fail_msg("expected an error loading %s", path);
    }
    assert_int_equal(fatal_code, LLMT_EXIT_USER);
    return fatal_message;
}

static void load_of_missing_file_names_path_and_reason(void **state) {
    (void)state;
    assert_string_equal(load_error("/nonexistent/run.nml"),
                        "llmtrain: error: /nonexistent/run.nml: cannot read the namelist file: No such file or directory");
    assert_string_equal(load_error("/tmp"), "llmtrain: error: /tmp: cannot read the namelist file: Is a directory");
}

static void load_of_binary_file_is_refused(void **state) {
    (void)state;
    char path[] = "/tmp/test_config_XXXXXX";
    int fd = mkstemp(path);
    assert_true(fd >= 0);
    close(fd);
    write_file(path, "&run\0 /", 7);
    char expected[256];
    snprintf(expected, sizeof expected, "llmtrain: error: %s: contains a NUL byte; is it a namelist text file?", path);
    assert_string_equal(load_error(path), expected);
    unlink(path);
}

static void load_reports_parse_errors_with_the_file_path(void **state) {
    (void)state;
    char path[] = "/tmp/test_config_XXXXXX";
    int fd = mkstemp(path);
    assert_true(fd >= 0);
    close(fd);
    const char *text = "&model\n  n_layers = 4\n/\n";
    write_file(path, text, strlen(text));
    char expected[256];
    snprintf(expected, sizeof expected, "llmtrain: error: %s:2:3: &model unknown key 'n_layers'", path);
    const char *got = load_error(path);
    if (strncmp(got, expected, strlen(expected)) != 0) fail_msg("got %s\nexpected prefix %s", got, expected);
    unlink(path);
}

/* The choice keys' enums (config_t.choice) follow their strings: the defaults, every value of
 * each key as parsed (any case), arch's defaults of the switches, and config_set_choice. */
static void choice_enums_follow_the_strings(void **state) {
    (void)state;
    config_t c;
    config_defaults(&c);
    assert_int_equal(c.choice.mode, CFG_MODE_TRAIN);
    assert_int_equal(c.choice.device, CFG_DEVICE_CPU);
    assert_int_equal(c.choice.schedule, CFG_SCHED_1F1B);
    assert_int_equal(c.choice.on_anomaly, CFG_POLICY_SKIP);
    assert_int_equal(c.choice.on_spike, CFG_POLICY_INHERIT);
    assert_int_equal(c.choice.init_depth_scaled, CFG_DEPTH_TOTAL);
    assert_int_equal(c.choice.data_format, CFG_FORMAT_AUTO);
    parse_ok("&run mode = 'EVAL' init_from = 'w.h5' /\n&model arch = 'llama' norm = 'layernorm' "
             "init = 'kaiming' init_depth_scaled = 'layer' drop_policy = 'position' router = 'mlp' /\n"
             "&parallel schedule = 'zb-h1' pp = 2 recompute = 'Selective' bind = 'none' /\n"
             "&train lr_schedule = 'wsd' precision = 'bf16' bf16_products = 'emulated' "
             "weights_storage = '16bit' activations_storage = 'fp32' on_anomaly = 'abort' "
             "on_spike = 'rollback' on_divergence = 'warn' /\n"
             "&data train_files = 'x' val_files = 'y' format = 'nanogpt' /\n", &c);
    assert_int_equal(c.choice.mode, CFG_MODE_EVAL);
    assert_int_equal(c.choice.arch, CFG_ARCH_LLAMA);
    assert_int_equal(c.choice.norm, CFG_NORM_LAYERNORM); /* given: wins over arch's default */
    assert_int_equal(c.choice.pos, CFG_POS_ROPE);         /* arch's defaults */
    assert_int_equal(c.choice.mlp, CFG_MLP_SWIGLU);
    assert_int_equal(c.choice.init_scheme, CFG_INIT_KAIMING);
    assert_int_equal(c.choice.init_depth_scaled, CFG_DEPTH_LAYER);
    assert_int_equal(c.choice.drop_policy, CFG_DROP_POSITION);
    assert_int_equal(c.choice.router, CFG_ROUTER_MLP);
    assert_int_equal(c.choice.schedule, CFG_SCHED_ZB_H1);
    assert_int_equal(c.choice.recompute, CFG_RECOMPUTE_SELECTIVE);
    assert_int_equal(c.choice.bind, CFG_BIND_NONE);
    assert_int_equal(c.choice.lr_schedule, CFG_LR_WSD);
    assert_int_equal(c.choice.precision, CFG_PRECISION_BF16);
    assert_int_equal(c.choice.offload, CFG_OFFLOAD_NONE);
    assert_int_equal(c.choice.bf16_products, CFG_BF16_EMULATED);
    assert_int_equal(c.choice.weights_storage, CFG_STORAGE_16BIT);
    assert_int_equal(c.choice.activations_storage, CFG_STORAGE_FP32);
    assert_int_equal(c.choice.on_anomaly, CFG_POLICY_ABORT);
    assert_int_equal(c.choice.on_spike, CFG_POLICY_ROLLBACK);
    assert_int_equal(c.choice.on_divergence, CFG_POLICY_WARN);
    assert_int_equal(c.choice.data_format, CFG_FORMAT_NANOGPT);
    assert_int_equal(config_set_choice(&c, "parallel", "recompute", "full"), 0);
    assert_string_equal(c.recompute, "full");
    assert_int_equal(c.choice.recompute, CFG_RECOMPUTE_FULL);
    assert_int_equal(config_set_choice(&c, "parallel", "recompute", "most"), -1);
    assert_int_equal(config_set_choice(&c, "parallel", "dp", "2"), -1);
    assert_string_equal(c.recompute, "full");
    config_destroy(&c);
}

int main(int argc, char **argv) {
    MPI_Init(&argc, &argv);
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(defaults_are_the_documented_values),
        cmocka_unit_test(choice_enums_follow_the_strings),
        cmocka_unit_test(minimal_file_gets_defaults_and_derived_d_ff_and_global_batch),
        cmocka_unit_test(every_key_reaches_its_field),
        cmocka_unit_test(names_and_choices_are_case_insensitive),
        cmocka_unit_test(integer_for_real_key_and_fortran_d_exponent_are_accepted),
        cmocka_unit_test(comments_strings_with_quotes_and_prose_between_groups),
        cmocka_unit_test(padded_vocab_rounds_up_to_a_multiple_of_128),
        cmocka_unit_test(repeat_count_is_checked_against_the_key_before_it_is_expanded),
        cmocka_unit_test(unknown_key_lists_valid_keys_and_suggests_the_closest),
        cmocka_unit_test(key_in_the_wrong_group_names_its_group),
        cmocka_unit_test(unknown_group_lists_valid_groups_and_suggests_the_closest),
        cmocka_unit_test(wrong_types_name_expected_and_given),
        cmocka_unit_test(array_for_a_scalar_key_is_refused),
        cmocka_unit_test(too_many_prompt_ids_is_refused),
        cmocka_unit_test(string_longer_than_field_is_refused),
        cmocka_unit_test(value_not_in_choices_lists_the_choices),
        cmocka_unit_test(anomaly_policies_are_checked_by_key),
        cmocka_unit_test(every_range_bound_is_enforced_with_its_message),
        cmocka_unit_test(path_variables_expand_once),
        cmocka_unit_test(integer_beyond_32_bits_is_refused_for_int_keys),
        cmocka_unit_test(unimplemented_features_are_refused_not_ignored),
        cmocka_unit_test(dropout_sets_the_three_rates_unless_given),
        cmocka_unit_test(converted_and_summed_keys_are_bounded_with_the_reason),
        cmocka_unit_test(derived_sizes_are_refused_naming_keys_and_numbers),
        cmocka_unit_test(padded_vocab_does_not_overflow_near_int_max),
        cmocka_unit_test(generate_needs_pp_1),
        cmocka_unit_test(zero3_works_with_interleaved),
        cmocka_unit_test(val_every_needs_val_files),
        cmocka_unit_test(duplicate_group_and_duplicate_key_are_errors),
        cmocka_unit_test(syntax_errors_come_through_fatal_user_with_the_path),
        cmocka_unit_test(d_model_must_be_divisible_by_n_head_naming_both_lines),
        cmocka_unit_test(global_batch_must_be_a_multiple_of_micro_batch_times_dp),
        cmocka_unit_test(recompute_layers_must_not_exceed_n_layer),
        cmocka_unit_test(min_lr_must_not_exceed_lr),
        cmocka_unit_test(training_needs_train_files),
        cmocka_unit_test(generation_needs_at_least_one_prompt_id),
        cmocka_unit_test(prompt_ids_must_be_below_vocab_size),
        cmocka_unit_test(to_namelist_round_trips_a_default_config),
        cmocka_unit_test(to_namelist_round_trips_awkward_values),
        cmocka_unit_test(to_namelist_writes_valid_namelist_syntax),
        cmocka_unit_test(to_namelist_is_snprintf_like_on_short_buffers),
        cmocka_unit_test(empty_prompt_is_echoed_as_a_comment),
        cmocka_unit_test(load_reads_broadcasts_and_keeps_text_and_path),
        cmocka_unit_test(profile_keys_are_parsed_and_checked),
        cmocka_unit_test(moe_keys_are_parsed_and_checked),
        cmocka_unit_test(load_of_missing_file_names_path_and_reason),
        cmocka_unit_test(load_of_binary_file_is_refused),
        cmocka_unit_test(load_reports_parse_errors_with_the_file_path),
    };
    int failed = cmocka_run_group_tests(tests, install_hook, NULL);
    MPI_Finalize();
    return failed;
}
