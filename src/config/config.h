/* config.h — the typed, validated run configuration read from a Fortran namelist.
 * Owns: the schema (groups, keys, types, defaults, allowed values: the table in config.c),
 * validation, and the echo of the effective configuration (config.c's header lists the files
 * behind this interface). Uses: namelist.h, core/. Used by: main, train/, model/, io/,
 * parallel/, tools/. Key names are what users write in their namelists; keep them. */
#ifndef LLMT_CONFIG_H
#define LLMT_CONFIG_H
#include <stdbool.h>
#include <stdint.h>
#include <stdio.h>

#define CFG_STR 256      /* max length of a string value (paths, names) */
#define CFG_MAX_IDS 1024 /* max prompt length in token ids */
#define CFG_ANOMALY_WINDOW_MAX 256 /* max &train anomaly_window (the detectors keep that many norms) */
#define CFG_MAX_STAGES 32 /* &stage groups in one namelist */

/* The keys of a &stage group, in the order of config.c's table (positions are kept per key). */
enum {
    STAGE_UNTIL_STEP, STAGE_UNTIL_TOKENS, STAGE_SEQ_LEN, STAGE_GLOBAL_BATCH, STAGE_TRAIN_FILES,
    STAGE_MIXTURE, STAGE_LR, STAGE_MIN_LR, STAGE_WARMUP_STEPS, STAGE_LR_SCHEDULE, CFG_STAGE_KEYS
};

/* One &stage group as written (config/stages.h says what each key means). A key the group does
 * not set is inherited from &model / &train / &data: key_line[k] == 0 says "not set". */
typedef struct cfg_stage {
    int until_step;
    int64_t until_tokens;
    int seq_len, global_batch;
    char train_files[256], mixture[256];
    double lr, min_lr;
    int warmup_steps;
    char lr_schedule[16];
    int line, col;                                 /* of the '&stage' */
    int key_line[CFG_STAGE_KEYS], key_col[CFG_STAGE_KEYS]; /* where each key was set (0: not) */
} cfg_stage_t;

/* config_t.products_missing bits: a rank's backend has no native bf16 products, bf16 products
 * no faster than fp32 ones, likewise fp16. */
#define CFG_MISSING_BF16_NATIVE 1u
#define CFG_MISSING_BF16_FASTER 2u
#define CFG_MISSING_FP16_FASTER 4u

/* The choice keys once parsed: each string key with a fixed set of values has an enum, in
 * config_t.choice, set by the loader with the string (the string stays for the echo, JSON and
 * checkpoint attributes; code that decides compares the enum). Whoever changes such a key after
 * loading uses config_set_choice, which keeps the two together. */
typedef enum cfg_mode { CFG_MODE_TRAIN, CFG_MODE_EVAL, CFG_MODE_GENERATE } cfg_mode_t;
typedef enum cfg_device { CFG_DEVICE_CPU, CFG_DEVICE_CUDA } cfg_device_t;
typedef enum cfg_arch { CFG_ARCH_GPT2, CFG_ARCH_LLAMA } cfg_arch_t;
typedef enum cfg_norm { CFG_NORM_LAYERNORM, CFG_NORM_RMSNORM } cfg_norm_t;
typedef enum cfg_pos { CFG_POS_LEARNED, CFG_POS_ROPE } cfg_pos_t;
typedef enum cfg_mlp { CFG_MLP_GELU, CFG_MLP_SWIGLU } cfg_mlp_t;
typedef enum cfg_rope_scaling { CFG_ROPE_SCALING_NONE, CFG_ROPE_SCALING_LLAMA3 } cfg_rope_scaling_t;
typedef enum cfg_init { CFG_INIT_GPT2, CFG_INIT_XAVIER, CFG_INIT_KAIMING, CFG_INIT_SMALL } cfg_init_t;
typedef enum cfg_depth_scaled { CFG_DEPTH_NONE, CFG_DEPTH_TOTAL, CFG_DEPTH_LAYER } cfg_depth_scaled_t;
typedef enum cfg_drop_policy { CFG_DROP_PROBS, CFG_DROP_POSITION } cfg_drop_policy_t;
typedef enum cfg_router { CFG_ROUTER_LINEAR, CFG_ROUTER_MLP } cfg_router_t;
typedef enum cfg_schedule { CFG_SCHED_1F1B, CFG_SCHED_GPIPE, CFG_SCHED_INTERLEAVED, CFG_SCHED_ZB_H1 } cfg_schedule_t;
typedef enum cfg_recompute { CFG_RECOMPUTE_NONE, CFG_RECOMPUTE_SELECTIVE, CFG_RECOMPUTE_FULL } cfg_recompute_t;
typedef enum cfg_bind { CFG_BIND_CORES, CFG_BIND_NONE } cfg_bind_t;
typedef enum cfg_lr_schedule { CFG_LR_COSINE, CFG_LR_CONSTANT, CFG_LR_LINEAR, CFG_LR_WSD } cfg_lr_schedule_t;
typedef enum cfg_precision { CFG_PRECISION_FP32, CFG_PRECISION_BF16, CFG_PRECISION_FP16 } cfg_precision_t;
typedef enum cfg_offload { CFG_OFFLOAD_NONE, CFG_OFFLOAD_OPTIMIZER } cfg_offload_t;
typedef enum cfg_bf16_products { CFG_BF16_AUTO, CFG_BF16_NATIVE, CFG_BF16_EMULATED } cfg_bf16_products_t;
/* weights_storage and activations_storage */
typedef enum cfg_storage { CFG_STORAGE_AUTO, CFG_STORAGE_16BIT, CFG_STORAGE_FP32 } cfg_storage_t;
/* on_anomaly, on_spike, on_divergence ('' = on_anomaly's: on_spike and on_divergence only) */
typedef enum cfg_policy { CFG_POLICY_INHERIT, CFG_POLICY_WARN, CFG_POLICY_SKIP, CFG_POLICY_ROLLBACK,
                          CFG_POLICY_ABORT } cfg_policy_t;
typedef enum cfg_elastic { CFG_ELASTIC_OFF, CFG_ELASTIC_SHRINK, CFG_ELASTIC_WAIT } cfg_elastic_t;
typedef enum cfg_data_format { CFG_FORMAT_AUTO, CFG_FORMAT_LLMC, CFG_FORMAT_NANOGPT } cfg_data_format_t;

typedef struct cfg_choices {
    cfg_mode_t mode;                /* &run mode */
    cfg_device_t device;            /* &run device */
    cfg_arch_t arch;                /* &model arch */
    cfg_norm_t norm;                /* &model norm (after arch's default) */
    cfg_pos_t pos;                  /* &model pos (after arch's default) */
    cfg_mlp_t mlp;                  /* &model mlp (after arch's default) */
    cfg_rope_scaling_t rope_scaling; /* &model rope_scaling */
    cfg_init_t init_scheme;         /* &model init */
    cfg_depth_scaled_t init_depth_scaled;
    cfg_drop_policy_t drop_policy;
    cfg_router_t router;
    cfg_schedule_t schedule;        /* &parallel schedule */
    cfg_recompute_t recompute;
    cfg_bind_t bind;
    cfg_lr_schedule_t lr_schedule;  /* &train lr_schedule (a &stage's own is its string) */
    cfg_precision_t precision;
    cfg_offload_t offload;
    cfg_bf16_products_t bf16_products;
    cfg_storage_t weights_storage, activations_storage;
    cfg_policy_t on_anomaly, on_spike, on_divergence;
    cfg_data_format_t data_format;  /* &data format */
    cfg_elastic_t elastic;          /* &run elastic (read by the jobscripts through --grid) */
} cfg_choices_t;

#define CFG_KEYS_MAX 256  /* more than the key table holds (config_internal.h's CFG_MAX_KEYS) */
#define CFG_GROUPS_MAX 8  /* the namelist groups, &stage included */

/* Where each key of a loaded configuration got its value, kept after loading (config_t.where)
 * so that the rules that live above config/ point at the keys they name the way config's own
 * messages do (model/spec.c: the model's shape rules). Read it through config_key_where; a
 * configuration from config_defaults has every key at its default. */
typedef struct config_positions {
    char file[CFG_STR];          /* the namelist's path, as messages name it */
    int line[CFG_KEYS_MAX], col[CFG_KEYS_MAX]; /* the file's entry of key k (0: none) */
    int arg[CFG_KEYS_MAX];       /* i + 1: override i set key k, after the file (0: none) */
    int argno[CFG_KEYS_MAX];     /* that override's position on the command line */
    int group_line[CFG_GROUPS_MAX], group_col[CFG_GROUPS_MAX]; /* each group's header (0: none) */
    char *labels;                /* owned: the overrides as messages name them, NUL-separated */
} config_positions_t;

/* One key's position (config_key_where). */
typedef struct config_where {
    const char *file;            /* the namelist's path */
    int line, col;               /* the file's entry whose value the key holds; 0: none (the
                                    default, or an override replaced it) */
    int argno;                   /* > 0: the command-line argument whose value it holds */
    const char *arg;             /* then how messages name it: "command line argument 2
                                    'model.top_k=5'"; else NULL */
    int group_line, group_col;   /* the header of the key's &group in the file; 0: none */
} config_where_t;

typedef struct config {
    /* &run */
    char name[CFG_STR];     /* run name; the run directory is out_dir/name */
    char out_dir[CFG_STR];  /* default 'runs' */
    char mode[16];          /* 'train' | 'eval' | 'generate' */
    char device[16];        /* 'cpu' | 'cuda' */
    int64_t seed;           /* default 1337 */
    char init_from[CFG_STR];/* HDF5 weights file to start from ('' = random init) */
    double memory_limit_gb; /* per rank; 0 = the node's memory shared by its ranks */
    double time_limit_min;  /* minutes from start; 0 = the Slurm job's end time, if any */
    char elastic[16];       /* 'off' | 'shrink' | 'wait': after a lost node (jobscripts/elastic.sbatch) */
    int min_nodes;          /* the fewest nodes elastic = 'shrink' continues on */
    int prompt_ids[CFG_MAX_IDS]; /* generate: prompt as token ids */
    int n_prompt_ids;       /* how many were given */
    char prompt[CFG_STR];   /* generate: a text prompt (needs &data tokenizer); wins over ids */
    int max_new_tokens;     /* generate: default 64 */
    double temperature;     /* generate: default 1.0; 0 = greedy */
    int top_k;              /* generate: default 40; 0 = no top-k */

    /* &model */
    int n_layer, n_head, d_model, d_ff; /* d_ff default 4*d_model (0 in file = default) */
    int vocab_size;         /* real vocabulary; padded to a multiple of 128 internally */
    int seq_len;
    /* architecture (docs/model.md "Llama-family options"): arch sets the defaults of the switches
     * after it; a switch given explicitly wins. Resolved after parsing. */
    char arch[16];          /* 'gpt2' | 'llama' */
    char norm[16];          /* 'layernorm' | 'rmsnorm' */
    double norm_eps;        /* rmsnorm's epsilon (layernorm: 1e-5, fixed) */
    char pos[16];           /* 'learned' | 'rope' */
    double rope_theta;      /* RoPE base, default 10000 */
    /* Llama 3.1's RoPE frequency adjustment (kernels/rope_math.h): 'none' | 'llama3' */
    char rope_scaling[16];
    double rope_scaling_factor, rope_low_freq_factor, rope_high_freq_factor;
    int rope_original_max_positions;
    int sliding_window;     /* Mistral's attention window: 0 = none; else seq_len must not exceed it */
    char mlp[16];           /* 'gelu' | 'swiglu' (d_ff: the width of gate and up) */
    int n_kv_head;          /* k/v heads (grouped-query attention); 0 in the file = n_head */
    bool tie_embeddings;    /* LM head = wte; .false.: a separate lm_head.w */
    bool bias;              /* biases in the linear layers */
    bool qkv_bias;          /* biases on q, k, v only (Qwen 2); bias = .true. has them too */
    double dropout;         /* sets the three below, each unless given */
    double attn_dropout;    /* attention probabilities (inside the tiled attention) */
    double resid_dropout;   /* each residual branch's output (attention and MLP) */
    double embd_dropout;    /* the embedding (token + position) */
    char init_scheme[16];   /* key 'init': 'gpt2' | 'xavier' | 'kaiming' | 'small' (model/init_scheme.c) */
    double init_std;        /* 'gpt2': the matrices' std; every scheme: the embeddings' */
    char init_depth_scaled[16]; /* 'none' | 'total' (1/sqrt(2 n_layer)) | 'layer' (1/sqrt(2 (l+1))) */
    /* Mixture of Experts (model/moe.h says what each does) */
    int n_experts;          /* 0 = dense */
    int top_k_moe;          /* namelist key 'top_k' in &model */
    int moe_every;          /* block l is MoE iff l % moe_every == moe_every - 1 */
    int d_ff_expert;        /* 0 in the file = d_ff */
    double capacity_factor; /* 0 = dropless */
    char drop_policy[16];   /* 'probs' | 'position' */
    double router_noise;    /* noisy top-k gating's scale; 0 = off */
    double aux_loss_coef, z_loss_coef;
    int n_shared_experts;
    char router[16];        /* 'linear' | 'mlp' */
    double moe_collapse_share; /* warn when one expert takes more than this share ... */
    int moe_collapse_steps;    /* ... of a layer's assignments for this many steps in a row */

    /* &parallel */
    int dp, tp, pp, ep;
    int cp;                 /* context parallelism: each sequence over cp ranks (model/ring.c) */
    char schedule[16];      /* 'gpipe' | '1f1b' | 'interleaved' */
    int virtual_stages;
    int zero_stage;         /* 0..3 */
    bool zero3_resident;    /* ZeRO-3: gathered blocks stay until the next update (else rotate) */
    bool sequence_parallel; /* tp > 1: norms, dropout, residual split along the tokens over tp */
    char recompute[16];     /* 'none' | 'selective' | 'full' */
    int recompute_layers;   /* recompute the first N blocks of each stage; -1 = all */
    double bucket_mb;
    char bind[16];          /* 'cores': llmtrain binds each rank with hwloc; 'none' */

    /* &train */
    int max_steps;
    int global_batch;       /* sequences per optimizer step; 0 in the file = micro_batch * dp */
    bool global_batch_derived; /* global_batch was not given (a resume may take the saved one) */
    /* Not a key: the backend computes in memory of its own (a GPU's), so the memory plan splits
     * into what that memory holds and what stays in host memory (train/planner.h). Set from
     * device = 'cuda' when the namelist is read, and by the trainer from its backend. */
    bool device_memory;
    /* Not a key: the products some rank's backend lacks (CFG_MISSING_* bits, OR-ed over every
     * rank by main before the model is planned), so that every rank chooses its product and
     * weights-storage types alike on a job whose nodes have different CPUs; 0 when none. */
    unsigned products_missing;
    int micro_batch;        /* sequences per forward/backward on one rank; 0 = the largest that
                               fits &run memory_limit_gb (chosen at startup by the planner) */
    double lr, min_lr;
    int warmup_steps;
    char lr_schedule[16];   /* 'constant' | 'cosine' | 'linear' | 'wsd' */
    double decay_fraction;  /* wsd: fraction of steps in the final decay, default 0.2 */
    double weight_decay, beta1, beta2, eps, grad_clip; /* grad_clip 0 = off */
    double label_smoothing; /* cross-entropy against (1 - e) onehot + e / vocab_size */
    double z_loss;          /* coefficient of mean(logsumexp^2) over the tokens (PaLM), 0 = off */
    char precision[8];      /* 'fp32' | 'bf16' | 'fp16' */
    char offload[12];       /* 'none' | 'optimizer': AdamW state and fp32 master weights in host
                               memory, the update on the CPU (train/optimizer.h) */
    char bf16_products[12]; /* 'auto' | 'native' | 'emulated': bf16 GEMMs on bf16 instructions */
    char weights_storage[8]; /* 'auto' | '16bit' | 'fp32': how a bf16/fp16 weights copy is kept
                               (model/gpt.h gpt_weights_type) */
    char activations_storage[8]; /* 'auto' | '16bit' | 'fp32': how the activations a block saves
                               for its backward are kept in a bf16/fp16 run
                               (model/gpt.h gpt_activations_type) */
    bool allow_tf32;        /* device = 'cuda': fp32 products may run on TF32 tensor cores */
    double loss_scale;      /* fp16: a fixed loss scale; 0 = dynamic (the four keys below) */
    double initial_loss_scale, min_loss_scale;
    int loss_scale_window, hysteresis; /* clean steps before doubling; overflows before halving */
    int inject_overflow_step; /* testing: an Inf in a gradient at this step (-1 = never) */
    char on_anomaly[16];    /* 'warn' | 'skip' | 'rollback' | 'abort': every detector's default */
    char on_spike[16];      /* '' (= on_anomaly) or a policy: spike and grad_explosion */
    char on_divergence[16]; /* '' (= on_anomaly) or a policy: rising validation loss */
    int anomaly_window;     /* EMA span, median window and warm-up of the detectors (steps) */
    double spike_zscore;    /* loss z-score that is a spike (0 = off) */
    double grad_explosion_ratio; /* gradient norm / median of the window that is one (0 = off) */
    int divergence_evals;   /* validation-loss rises in a row that are divergence (0 = off) */
    int overflow_streak;    /* fp16: overflowing steps in a row that are a collapse (0 = off) */
    int max_rollbacks;      /* rollbacks a run may make; one more is an abort */
    int inject_nan_step;    /* testing: make the loss NaN at this step (-1 = never) */
    int inject_spike_step;  /* testing: loss and gradients x100 on the batch of this step (-1) */
    int dump_grads_step;    /* testing: write the reduced gradients of this step (0-based, before
                               clipping) to grads_stepNNNNNN.h5 in global shapes (-1 = never) */

    /* &data */
    char train_files[CFG_STR]; /* glob pattern(s), blank- or comma-separated */
    char val_files[CFG_STR];
    bool shuffle;
    int val_every;          /* 0 = never */
    int val_batches;
    char tokenizer[CFG_STR];
    char data_format[16];   /* key 'format': 'auto' | 'llmc' | 'nanogpt' (io/shards.h) */
    char mixture[CFG_STR];  /* 'pattern:weight, pattern:weight' instead of train_files ('' = none) */
    int mixture_line, mixture_col;         /* where &data mixture was set (0: not set) */
    int train_files_line, train_files_col; /* where &data train_files was set (0: not set) */

    /* &stage (repeated; applied in file order) */
    cfg_stage_t stages[CFG_MAX_STAGES];
    int n_stages;
    int stage_at;           /* parsing and echo: the stage the table's &stage keys refer to */

    /* &checkpoint */
    char ckpt_dir[CFG_STR]; /* key 'dir'; default out_dir/name */
    int ckpt_every, ckpt_keep;
    char resume[CFG_STR];   /* 'none' | 'auto' | path */
    bool resume_given;      /* resume was set in the namelist (else 'none', or 'auto' when the
                               Slurm job was requeued: ckpt_resume_default) */
    double timeout_s;       /* watchdog: a wait longer than this ends the job with a message */
    double io_timeout_s;    /* the watchdog timeout of checkpoint / weights reads and writes */
    bool ckpt_overwrite;    /* key 'overwrite': a fresh run may replace an older run's files */
    bool save_weights;      /* write step-0 and final weights (weights_stepNNNNNN.h5) */
    int striping_factor;    /* Lustre: OSTs per checkpoint file (0 = file system default) */
    int striping_unit;      /* Lustre: stripe size in bytes (0 = default) */
    double ckpt_staging_mb; /* the staging buffer of sharded checkpoint I/O, MiB */
    bool ckpt_async;        /* key 'async': periodic saves written by a background thread */

    /* &log */
    int log_every;          /* key 'every' */
    bool jsonl;
    bool tensorboard;
    double peak_flops;      /* FLOP/s for MFU; 0 = measure the BLAS peak at startup */
    char papi_events[CFG_STR]; /* 'PAPI_TOT_INS,PAPI_TOT_CYC': counted per phase (core/counters.h) */
    bool profile;           /* the timeline trace.json (train/profiling.c) */
    char profile_steps[32]; /* 'a:b': the steps (1-based, inclusive) the timeline holds; '' = all */
    int64_t profile_first, profile_last; /* parsed profile_steps (0, 0 when '') */
    double carbon_intensity; /* gCO2/kWh for the emissions of the run's energy; 0 = not reported */
    double straggler_ratio; /* a rank whose busy time is this x its peers' median is named; 0 = off */
    int link_probe_every;   /* steps between link probes of a job on 3 nodes or more; 0 = off */
    int link_probe_kib;     /* the probe's size (parallel/linkprobe.h) */

    /* the choice keys above as enums (cfg_choices_t) */
    cfg_choices_t choice;

    /* provenance */
    char source_path[CFG_STR];
    config_positions_t where; /* where each key was set (config_key_where) */
    char *text;             /* the namelist text as read (owned) */
    char *overrides;        /* the command-line overrides as given, blank-separated; "" if none
                               (owned; echoed by config_to_namelist) */
} config_t;

/* Command-line overrides: n arguments "group.key=value", args[0] at position first_argno of the
 * command line (messages say "command line argument 2 'train.max_step=20': ..."). Each is parsed
 * as the namelist text "&group key = value /" and checked like a key of the file (type, range,
 * choices, not implemented, then the cross-key checks on the result); it replaces the file's
 * value, a later override an earlier one's. A string key's value may be given without quotes
 * (the shell removes them): run.name=x is run.name='x'. */
typedef struct config_args {
    const char *const *args;
    int n;
    int first_argno;
    bool plan_devices; /* llmtrain --plan --machine: the machine file says what the devices are, so
                          &run device = 'cuda' is accepted in a build without CUDA (planning only) */
} config_args_t;

/* config_parse, then the overrides (args may be NULL). */
void config_parse_overrides(const char *path, const char *text, const config_args_t *args, config_t *cfg);
/* config_load, then the overrides; rank 0's overrides are broadcast, so every rank applies the
 * same ones. */
void config_load_overrides(const char *path, const config_args_t *args, config_t *cfg);

/* Parse and validate `text` (read from `path`, used in messages). On any error calls
 * fatal_user() with "path:line:col: &group key: what is wrong (valid keys: ...)".
 * Every rank must call it with the same text. */
void config_parse(const char *path, const char *text, config_t *cfg);
/* Read the file on rank 0, broadcast, parse everywhere. */
void config_load(const char *path, config_t *cfg);
/* Defaults only (for tests and tools). */
void config_defaults(config_t *cfg);
/* Write the effective configuration as a namelist (all groups, defaults filled in; a comment
 * line names the overrides, if any) to `buf`.
 * Returns the number of characters that would have been written (snprintf-like). */
int config_to_namelist(const config_t *cfg, char *buf, int bufsize);
void config_destroy(config_t *cfg);
/* The schema as one JSON object (llmtrain --keys): {"groups": [...], "keys": [{group, name, type
 * (int|int64|real|string|bool|int_array), default (the table's; 0 or '' may mean "derived"),
 * min, min_inclusive, max, max_inclusive (null: unbounded), choices (null: free text), path (${VAR}
 * is expanded), max_length (strings), array_length (int arrays), repeated_group (&stage),
 * planned, not_implemented, why}, ...]}: tools (validation/fuzz/config_fuzz.py) read it, so a
 * new key reaches them without an edit. */
void config_keys_json(FILE *out);
/* k/v heads of the attention: n_kv_head, or n_head where it is 0 (config_defaults). */
int config_kv_heads(const config_t *cfg);
/* Vocabulary padded to a multiple of 128. */
int config_padded_vocab(const config_t *cfg);
/* Sets choice key `key` of &group (e.g. "parallel", "recompute") to one of its values, string
 * and enum together (for code that tries other setups on a copy, and tests). 0, or -1 when the
 * key is not a choice key or the value not one of its choices (nothing changed). */
int config_set_choice(config_t *cfg, const char *group, const char *key, const char *value);
/* Where key `key` of &`group` got its value ("model", "n_head"; a name not in the key table is a
 * bug: ASSERT). Every rank holds the same positions. */
config_where_t config_key_where(const config_positions_t *where, const char *group, const char *key);
/* "line 7", "command line argument 2" or "default": where w's value came from, as the messages
 * that name several keys say it (buf: at least 32 bytes). */
const char *config_where_text(const config_where_t *w, char buf[32]);
/* The start of a message about a rule on keys a and b, pointing at the first of them that was
 * given (a's first), else at the header of a's group, else b's, else the top of the file:
 * "inputs/x.nml:3:5: " or "command line argument 2 'model.d_model=30': ". Returns buf. */
char *config_where_start(const config_where_t *a, const config_where_t *b, char *buf, size_t size);
/* Whether there is a weights copy that can be kept in 16-bit storage (&train weights_storage):
 * &train precision bf16 or fp16. */
bool config_weights_16bit_possible(const config_t *cfg);
/* Why &parallel cp > 1 cannot run cfg (the parser's own rules, config_checks.c: seq_len / 2
 * and every &stage's own seq_len / 2 divisible by cp, no generation, no experts; device 'cpu'
 * unless any_device), as "&parallel cp = N: why"; NULL when it can (or cp = 1). */
const char *config_cp_error(const config_t *cfg, bool any_device, char *buf, size_t len);
/* Why &parallel sequence_parallel cannot run cfg (the parser's rules: tp > 1, no generation,
 * every seq_len divisible by tp), as one line in buf; NULL when it can or sp is off. */
const char *config_sp_error(const config_t *cfg, char *buf, size_t len);
#endif
