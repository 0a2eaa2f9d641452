/* llmprep.c — tokenise text corpora into llm.c token shards, in parallel under MPI.
 *
 *   llmprep [--tokenizer PATH | --train-vocab N] --out DIR [--val-fraction 0.01]
 *           [--shard-tokens 100000000] [--doc-separator SEP] [--chunk-bytes N] FILES...
 *
 * A file is a document; with --doc-separator (C escapes: '\n\n') each file is split into
 * documents at every occurrence of SEP (empty documents are skipped). Every document is
 * preceded by <|endoftext|> (llm.c / nanoGPT) and encoded like tiktoken's encode_ordinary.
 * The global token stream (documents in command-line and file order) is cut into: val = its
 * first round(val_fraction x total) tokens (llm.c's tinyshakespeare convention), train = the
 * rest; each split into shards of at most --shard-tokens tokens: DIR/val_000000.bin ...,
 * DIR/train_000000.bin .... Beside them: DIR/tokenizer.tiktoken (the vocabulary as a rank file)
 * and DIR/manifest.json (token counts and sha256 per shard, totals, files, tokenizer).
 * Shards are llm.c's version 1 (uint16 ids) when the vocabulary has at most 65,536 ids, else
 * version 2 (uint32 ids, as llm.c's Llama 3 scripts write them); --shard-version 2 asks for
 * version 2 with any vocabulary.
 *
 * Parallel: rank r takes the documents that start in its 1/P of the concatenated input bytes,
 * encodes them, and the ranks then exchange token ranges so that each shard is written whole by
 * one rank in global order: the output is byte-identical for any number of ranks. With
 * --train-vocab N every rank counts the words of its documents, rank 0 trains on the summed
 * counts (deterministic) and writes DIR/tokenizer.tiktoken, which every rank then loads.
 * Memory: each rank holds its tokens (2 bytes each with version 1, 4 with version 2: about half
 * or all of its share of the input).
 *
 * Uses: io/tokenizer, io/shards, core/ (errors, timers, fileio: make_dirs, atomic writes). */
#include "core/error.h"
#include "core/fileio.h"
#include "core/json.h"
#include "core/sha256.h"
#include "core/timer.h"
#include "core/version.h"
#include "io/shards.h"
#include "io/tokenizer.h"
#include <ctype.h>
#include <errno.h>
#include <fcntl.h>
#include <getopt.h>
#include <math.h>
#include <stdbool.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/mman.h>
#include <sys/stat.h>
#include <unistd.h>

#define DEFAULT_TOKENIZER "data/gpt2/gpt2.tiktoken"
#define MSG_LEN 2048

static const char *usage =
    "usage: llmprep [--tokenizer PATH | --train-vocab N] --out DIR [--val-fraction F]\n"
    "               [--shard-tokens N] [--shard-version 1|2] [--doc-separator SEP]\n"
    "               [--chunk-bytes N] FILES...\n"
    "  --tokenizer PATH     vocabulary: a tiktoken rank file, or a directory / vocab.json with\n"
    "                       merges.txt beside it (default " DEFAULT_TOKENIZER ")\n"
    "  --train-vocab N      instead, train a byte-level BPE vocabulary of N ids on the input\n"
    "  --out DIR            output directory (created)\n"
    "  --val-fraction F     the first F of the tokens form the validation split (default 0.01)\n"
    "  --shard-tokens N     tokens per shard at most (default 100000000)\n"
    "  --shard-version V    1: uint16 ids, 2: uint32 ids (default: 1 when the vocabulary has at\n"
    "                       most 65536 ids, else 2; 1 is refused for a larger one)\n"
    "  --doc-separator SEP  split files into documents at SEP (C escapes, e.g. '\\n\\n');\n"
    "                       without it a file is a document\n"
    "  --chunk-bytes N      encode documents in slices of about N bytes (default 1048576)\n"
    "  --version            the version, the compiler and the MPI library\n";

/* llmprep --version: llmtrain's version (one source tree) and what this binary was built with. */
static void print_version(void) {
    char mpi[MPI_MAX_LIBRARY_VERSION_STRING] = "";
    int len = 0;
    MPI_CHECK(MPI_Get_library_version(mpi, &len));
    mpi[strcspn(mpi, "\n")] = '\0'; /* Open MPI adds build details on more lines */
#if defined(__clang__)
    const char *compiler = "clang";
#elif defined(__GNUC__)
    const char *compiler = "gcc";
#else
    const char *compiler = "cc";
#endif
    printf("llmprep (llmtrain) %s\n", LLMT_VERSION);
    printf("compiler: %s %s\n", compiler, __VERSION__);
    printf("MPI: %s\n", mpi);
}

typedef struct prep_opts {
    const char *tokenizer, *out;
    uint32_t train_vocab;  /* 0: load --tokenizer */
    double val_fraction;
    uint64_t shard_tokens;
    int shard_version;     /* 0: by the vocabulary; 1 or 2 as asked */
    size_t chunk_bytes;
    char sep[256];
    size_t sep_len;        /* 0: a file is a document */
    const char *sep_arg;
    char **files;
    int n_files;
} prep_opts_t;

typedef struct doc { /* a document: bytes [off, off + len) of file `file` */
    int file;
    uint64_t off, len;
} doc_t;

typedef struct prep {
    prep_opts_t o;
    int rank, size;
    uint64_t *file_bytes, *file_start, total_bytes, lo, hi; /* this rank: [lo, hi) */
    const char **maps;     /* mapped files (NULL until needed) */
    doc_t *docs;
    size_t n_docs;
    uint64_t my_bytes;     /* bytes of this rank's documents */
    tokenizer_t *tok;
    void *tokens;          /* this rank's tokens, in order: uint16 or uint32 by `width` */
    int width;             /* bytes per id: 2 (shard version 1) or 4 (version 2) */
    size_t n_tokens, cap_tokens;
} prep_t;

/* ------------------------------------------------------------------ options */

static uint64_t parse_count(const char *opt, const char *s, uint64_t min, uint64_t max) {
    char *end;
    errno = 0;
    double v = strtod(s, &end); /* accepts 1e8 */
    if (end == s || *end || errno || v != floor(v) || v < (double)min || v > (double)max)
        fatal_user("%s '%s': expected a whole number in [%llu, %llu]", opt, s,
                   (unsigned long long)min, (unsigned long long)max);
    return (uint64_t)v;
}

/* C escapes \n \r \t \\ \xHH into bytes. */
static size_t parse_separator(const char *s, char *out, size_t cap) {
    size_t n = 0;
    for (; *s; s++) {
        if (n + 1 >= cap) fatal_user("--doc-separator is longer than %zu bytes", cap - 1);
        if (*s != '\\') {
            out[n++] = *s;
            continue;
        }
        char c = *++s;
        if (c == 'n') out[n++] = '\n';
        else if (c == 'r') out[n++] = '\r';
        else if (c == 't') out[n++] = '\t';
        else if (c == '\\') out[n++] = '\\';
        else if (c == 'x' && isxdigit((unsigned char)s[1]) && isxdigit((unsigned char)s[2])) {
            char hex[3] = {s[1], s[2], 0};
            out[n++] = (char)strtol(hex, NULL, 16);
            s += 2;
        } else {
            fatal_user("--doc-separator: unknown escape '\\%c' (use \\n \\r \\t \\\\ "
                       "\\xHH)", c ? c : ' ');
        }
    }
    if (n == 0) fatal_user("--doc-separator is empty");
    return n;
}

static void parse_options(prep_opts_t *o, int argc, char **argv, int rank) {
    static const struct option longs[] = {
        {"tokenizer", required_argument, 0, 't'},   {"train-vocab", required_argument, 0, 'v'},
        {"out", required_argument, 0, 'o'},         {"val-fraction", required_argument, 0, 'f'},
        {"shard-tokens", required_argument, 0, 's'}, {"doc-separator", required_argument, 0, 'd'},
        {"chunk-bytes", required_argument, 0, 'c'}, {"help", no_argument, 0, 'h'},
        {"shard-version", required_argument, 0, 'w'},
        {"version", no_argument, 0, 'V'},           {0, 0, 0, 0}};
    *o = (prep_opts_t){.val_fraction = 0.01, .shard_tokens = 100000000, .chunk_bytes = 1 << 20};
    opterr = 0;
    for (int c; (c = getopt_long(argc, argv, "h", longs, NULL)) != -1;) {
        char *end;
        switch (c) {
        case 't': o->tokenizer = optarg; break;
        case 'v':
            o->train_vocab = (uint32_t)parse_count("--train-vocab", optarg, 257, 65536);
            break;
        case 'o': o->out = optarg; break;
        case 's': o->shard_tokens = parse_count("--shard-tokens", optarg, 1, INT32_MAX); break;
        case 'w': o->shard_version = (int)parse_count("--shard-version", optarg, 1, 2); break;
        case 'c': o->chunk_bytes = parse_count("--chunk-bytes", optarg, 1, 1ull << 40); break;
        case 'd':
            o->sep_arg = optarg;
            o->sep_len = parse_separator(optarg, o->sep, sizeof o->sep);
            break;
        case 'f':
            o->val_fraction = strtod(optarg, &end);
            if (end == optarg || *end || !(o->val_fraction >= 0 && o->val_fraction < 1))
                fatal_user("--val-fraction '%s': expected a number in [0, 1)", optarg);
            break;
        case 'h':
        case 'V':
            if (rank == 0 && c == 'h') fputs(usage, stdout);
            if (rank == 0 && c == 'V') print_version();
            MPI_Finalize();
            exit(0);
        default:
            fatal_user("unknown or incomplete option '%s'\n%s", argv[optind - 1], usage);
        }
    }
    if (o->tokenizer && o->train_vocab)
        fatal_user("give either --tokenizer or --train-vocab, not both");
    if (!o->tokenizer && !o->train_vocab) o->tokenizer = DEFAULT_TOKENIZER;
    if (!o->out) fatal_user("--out DIR is required\n%s", usage);
    if (strlen(o->out) > 900) fatal_user("--out: a path of at most 900 bytes, please");
    if (optind >= argc) fatal_user("no input files\n%s", usage);
    o->files = argv + optind;
    o->n_files = argc - optind;
}

/* ------------------------------------------------------------------ agreeing on errors */

/* Rank 0 found `msg` (empty: no error): every rank learns it and all stop with it together. */
static void agree_on_error(const char *msg, int rank) {
    char buf[MSG_LEN] = "";
    if (rank == 0) snprintf(buf, sizeof buf, "%s", msg);
    MPI_CHECK(MPI_Bcast(buf, sizeof buf, MPI_CHAR, 0, MPI_COMM_WORLD));
    if (buf[0]) fatal_user("%s", buf);
}

/* Rank 0 checks every input file and the output directory; all ranks get the sizes. */
static void check_inputs(prep_t *p) {
    char msg[MSG_LEN] = "";
    p->file_bytes = calloc((size_t)p->o.n_files, sizeof *p->file_bytes);
    p->file_start = calloc((size_t)p->o.n_files + 1, sizeof *p->file_start);
    PTR_CHECK(p->file_bytes);
    PTR_CHECK(p->file_start);
    for (int i = 0; p->rank == 0 && i < p->o.n_files && !msg[0]; i++) {
        struct stat st;
        int fd = file_open_regular(p->o.files[i], &st); /* a FIFO would block the open */
        if (fd < 0 && (errno == EISDIR || errno == EINVAL))
            snprintf(msg, sizeof msg, "input file %d '%s': not a regular file (a %s)", i + 1,
                     p->o.files[i], errno == EISDIR ? "directory" : "FIFO, socket or device");
        else if (fd < 0)
            snprintf(msg, sizeof msg, "input file %d '%s': cannot read: %s", i + 1, p->o.files[i],
                     strerror(errno));
        else
            p->file_bytes[i] = (uint64_t)st.st_size;
        if (fd >= 0) close(fd);
    }
    if (p->rank == 0 && !msg[0] && (make_dirs(p->o.out) != 0 || access(p->o.out, W_OK) != 0))
        snprintf(msg, sizeof msg, "--out %s: cannot write there: %s", p->o.out,
                 strerror(errno));
    agree_on_error(msg, p->rank);
    MPI_CHECK(MPI_Bcast(p->file_bytes, p->o.n_files, MPI_UINT64_T, 0, MPI_COMM_WORLD));
    for (int i = 0; i < p->o.n_files; i++)
        p->file_start[i + 1] = p->file_start[i] + p->file_bytes[i];
    p->total_bytes = p->file_start[p->o.n_files];
    if (p->total_bytes == 0) fatal_user("the input files hold no text");
    unsigned __int128 t = p->total_bytes;
    p->lo = (uint64_t)(t * (unsigned)p->rank / (unsigned)p->size);
    p->hi = (uint64_t)(t * (unsigned)(p->rank + 1) / (unsigned)p->size);
}

/* ------------------------------------------------------------------ documents */

static const char *file_map(prep_t *p, int i) {
    if (p->maps[i]) return p->maps[i];
    int fd = file_open_regular(p->o.files[i], NULL);
    if (fd < 0)
        fatal_user_here("input file %d '%s': cannot read: %s", i + 1, p->o.files[i],
                        file_strerror(errno));
    void *m = mmap(NULL, p->file_bytes[i], PROT_READ, MAP_PRIVATE, fd, 0);
    if (m == MAP_FAILED)
        fatal_user_here("%s: cannot map: %s", p->o.files[i], strerror(errno));
    close(fd);
    madvise(m, p->file_bytes[i], MADV_SEQUENTIAL);
    return p->maps[i] = m;
}

static void add_doc(prep_t *p, int file, uint64_t off, uint64_t len, size_t *cap) {
    if (len == 0) return;
    if (p->n_docs == *cap) {
        *cap = *cap ? 2 * *cap : 1024;
        p->docs = realloc(p->docs, *cap * sizeof *p->docs);
        PTR_CHECK(p->docs);
    }
    p->docs[p->n_docs++] = (doc_t){file, off, len};
    p->my_bytes += len;
}

/* The documents of file i that start in [lo, hi). Separators are found scanning from the start
 * of the file, so every rank cuts a file at the same places. */
static void find_docs_in_file(prep_t *p, int i, size_t *cap) {
    uint64_t start = p->file_start[i], size = p->file_bytes[i];
    if (size == 0 || start >= p->hi || start + size <= p->lo) return;
    if (p->o.sep_len == 0) {
        if (start >= p->lo) add_doc(p, i, 0, size, cap);
        return;
    }
    const char *base = file_map(p, i);
    for (uint64_t pos = 0; pos <= size && start + pos < p->hi;) {
        const char *q = memmem(base + pos, size - pos, p->o.sep, p->o.sep_len);
        uint64_t end = q ? (uint64_t)(q - base) : size;
        if (start + pos >= p->lo) add_doc(p, i, pos, end - pos, cap);
        if (!q) break;
        pos = end + p->o.sep_len;
    }
}

static void find_docs(prep_t *p) {
    size_t cap = 0;
    p->maps = calloc((size_t)p->o.n_files, sizeof *p->maps);
    PTR_CHECK(p->maps);
    for (int i = 0; i < p->o.n_files; i++) find_docs_in_file(p, i, &cap);
}

/* ------------------------------------------------------------------ progress (rank 0) */

typedef struct progress {
    const char *what;
    double t0, last;
    uint64_t done, total; /* this rank's bytes */
    int size;
    bool tty, printed;
} progress_t;

static void progress_start(progress_t *pr, const char *what, uint64_t total, int size) {
    *pr = (progress_t){what, now_sec(), now_sec(), 0, total, size, isatty(2) != 0, false};
}

/* Every second on a terminal (one line rewritten), every 10 s otherwise. The whole job's rate
 * and ETA are estimated from rank 0's share, which is 1/P of the input. */
static void progress_add(progress_t *pr, uint64_t bytes, int rank) {
    pr->done += bytes;
    double now = now_sec();
    if (rank != 0 || now - pr->last < (pr->tty ? 1.0 : 10.0)) return;
    pr->last = now;
    double rate = (double)pr->done / (now - pr->t0 + 1e-9);
    double eta = rate > 0 ? (double)(pr->total - pr->done) / rate : 0;
    double pct = 100.0 * (double)pr->done / (double)(pr->total ? pr->total : 1);
    fprintf(stderr, "%sllmprep: %s %5.1f%%  %.1f of %.1f MB  %.1f MB/s  ETA %.0f s%s",
            pr->tty ? "\r" : "", pr->what, pct,
            (double)pr->done * pr->size / 1e6, (double)pr->total * pr->size / 1e6,
            rate * pr->size / 1e6, eta, pr->tty ? "   " : "\n");
    fflush(stderr);
    pr->printed = true;
}

static void progress_end(progress_t *pr, int rank) {
    if (rank == 0 && pr->printed && pr->tty) fputc('\n', stderr);
}

/* Call fn on the slices of document d, cut where encoding apart changes nothing. */
typedef void (*slice_fn)(prep_t *p, const char *text, size_t len, void *arg);
static void for_each_slice(prep_t *p, const doc_t *d, slice_fn fn, void *arg, progress_t *pr) {
    const char *text = file_map(p, d->file) + d->off;
    for (size_t s = 0, e; s < d->len; s = e) {
        size_t want = s + p->o.chunk_bytes;
        e = d->len - s <= p->o.chunk_bytes ? d->len : tokenizer_cut(p->tok, text, d->len, want);
        fn(p, text + s, e - s, arg);
        progress_add(pr, e - s, p->rank);
    }
}

/* ------------------------------------------------------------------ the tokenizer */

static void count_slice(prep_t *p, const char *text, size_t len, void *arg) {
    (void)p;
    tok_counter_add_text(arg, text, len);
}

/* Send or receive a buffer of any size in pieces MPI's int counts can hold. */
static void send_bytes(const char *buf, uint64_t len, int to) {
    for (uint64_t o = 0; o < len; o += 1u << 30) {
        int n = (int)(len - o < (1u << 30) ? len - o : (1u << 30));
        MPI_CHECK(MPI_Send(buf + o, n, MPI_BYTE, to, 11, MPI_COMM_WORLD));
    }
}

static void recv_bytes(char *buf, uint64_t len, int from) {
    for (uint64_t o = 0; o < len; o += 1u << 30) {
        int n = (int)(len - o < (1u << 30) ? len - o : (1u << 30));
        MPI_CHECK(MPI_Recv(buf + o, n, MPI_BYTE, from, 11, MPI_COMM_WORLD, MPI_STATUS_IGNORE));
    }
}

/* Rank 0 sums every rank's word counts and trains; the vocabulary goes to DIR. */
static void train_vocab(prep_t *p, const char *saved) {
    tok_counter_t *c = tok_counter_create();
    progress_t pr;
    progress_start(&pr, "counting words", p->my_bytes, p->size);
    for (size_t i = 0; i < p->n_docs; i++) for_each_slice(p, &p->docs[i], count_slice, c, &pr);
    progress_end(&pr, p->rank);
    size_t len = 0;
    char *packed = p->rank ? tok_counter_pack(c, &len) : NULL;
    uint64_t mine = p->rank ? len : 0, *lens = calloc((size_t)p->size, sizeof *lens);
    PTR_CHECK(lens);
    MPI_CHECK(MPI_Gather(&mine, 1, MPI_UINT64_T, lens, 1, MPI_UINT64_T, 0, MPI_COMM_WORLD));
    if (p->rank) send_bytes(packed, mine, 0);
    for (int r = 1; p->rank == 0 && r < p->size; r++) {
        char *buf = malloc(lens[r] ? lens[r] : 1);
        PTR_CHECK(buf);
        recv_bytes(buf, lens[r], r);
        ASSERT(tok_counter_unpack_add(c, buf, lens[r]) == 0);
        free(buf);
    }
    char msg[MSG_LEN] = "", err[1024];
    if (p->rank == 0) {
        double t0 = now_sec();
        tokenizer_t *t = NULL;
        if (tokenizer_train(&t, c, p->o.train_vocab, err, sizeof err) != 0)
            snprintf(msg, sizeof msg, "--train-vocab: %s", err);
        else if (tokenizer_save(t, saved) != 0)
            snprintf(msg, sizeof msg, "%s: cannot write: %s", saved, strerror(errno));
        else
            printf("trained %u ranks + %s on %zu distinct words in %.1f s\n",
                   tokenizer_n_ranks(t), TOKENIZER_EOT_TEXT, tok_counter_n_words(c),
                   now_sec() - t0);
        tokenizer_destroy(t);
    }
    agree_on_error(msg, p->rank);
    free(lens);
    free(packed);
    tok_counter_destroy(c);
}

static void load_tokenizer(prep_t *p) {
    char saved[1024], err[1024];
    snprintf(saved, sizeof saved, "%s/tokenizer.tiktoken", p->o.out);
    if (p->o.train_vocab) train_vocab(p, saved);
    const char *path = p->o.train_vocab ? saved : p->o.tokenizer;
    int failed = tokenizer_create(&p->tok, path, err, sizeof err) != 0, n_failed = 0;
    if (!failed) /* a tokenizer.json or .model is kept under its own name */
        snprintf(saved, sizeof saved, "%s/%s", p->o.out, tokenizer_file_name(p->tok));
    MPI_CHECK(MPI_Allreduce(&failed, &n_failed, 1, MPI_INT, MPI_SUM, MPI_COMM_WORLD));
    if (n_failed == p->size) fatal_user("--tokenizer: %s", err); /* the usual case */
    if (failed) fatal_user_here("--tokenizer: %s", err);       /* only some ranks */
    if (n_failed) MPI_CHECK(MPI_Barrier(MPI_COMM_WORLD));               /* wait for the abort */
    const uint32_t n_ids = tokenizer_vocab_size(p->tok);
    if (n_ids > SHARD_U16_MAX_VOCAB && p->o.shard_version == SHARD_VERSION_U16)
        fatal_user("--shard-version 1: %s has %u token ids, more than version 1's uint16 ids hold "
                   "(65536): use --shard-version 2 (uint32 ids) or leave it out", path, n_ids);
    const bool wide = p->o.shard_version == SHARD_VERSION_U32 ||
                      (p->o.shard_version == 0 && n_ids > SHARD_U16_MAX_VOCAB);
    p->width = wide ? 4 : 2;
    char msg[MSG_LEN] = "";
    if (p->rank == 0 && !p->o.train_vocab && tokenizer_save(p->tok, saved) != 0)
        snprintf(msg, sizeof msg, "%s: cannot write: %s", saved, strerror(errno));
    agree_on_error(msg, p->rank);
}

/* ------------------------------------------------------------------ encoding */

static void push_token(prep_t *p, uint32_t id) {
    if (p->n_tokens == p->cap_tokens) {
        p->cap_tokens = p->cap_tokens ? 2 * p->cap_tokens : 1 << 20;
        p->tokens = realloc(p->tokens, p->cap_tokens * (size_t)p->width);
        PTR_CHECK(p->tokens);
    }
    if (p->width == 4) ((uint32_t *)p->tokens)[p->n_tokens++] = id;
    else ((uint16_t *)p->tokens)[p->n_tokens++] = (uint16_t)id;
}

static void encode_slice(prep_t *p, const char *text, size_t len, void *arg) {
    tok_ids_t *ids = arg;
    ids->n = 0;
    tokenizer_encode(p->tok, text, len, 0, ids);
    for (size_t i = 0; i < ids->n; i++) push_token(p, ids->ids[i]);
}

static void encode_docs(prep_t *p) {
    tok_ids_t ids = {0};
    progress_t pr;
    progress_start(&pr, "encoding", p->my_bytes, p->size);
    for (size_t i = 0; i < p->n_docs; i++) {
        push_token(p, tokenizer_eot(p->tok));
        for_each_slice(p, &p->docs[i], encode_slice, &ids, &pr);
    }
    progress_end(&pr, p->rank);
    tok_ids_free(&ids);
}

/* sha256 of a whole file (the shard just written, as it is on disk; core/sha256 streams it).
 * A read error is an error, not a short hash. */
static void shard_sha256(const char *path, uint8_t out[32]) {
    if (sha256_file(path, out) != 0) fatal_user_here("%s: cannot read back: %s", path, strerror(errno));
}

/* ------------------------------------------------------------------ shards */

typedef struct shard_plan {
    char name[32];  /* val_000000.bin */
    bool val;
    uint64_t start, count; /* global token range */
} shard_plan_t;

/* val = the first round(f * total) tokens (at least 1 when f > 0), train = the rest. */
static shard_plan_t *plan_shards(const prep_t *p, uint64_t total, uint64_t *n_val, int *n_out) {
    uint64_t v = p->o.val_fraction > 0 ? (uint64_t)llround(p->o.val_fraction * (double)total) : 0;
    if (p->o.val_fraction > 0 && v == 0) v = 1;
    if (v >= total)
        fatal_user("--val-fraction %g leaves no training tokens (%llu tokens in all)",
                   p->o.val_fraction, (unsigned long long)total);
    uint64_t s = p->o.shard_tokens, nv = (v + s - 1) / s, nt = (total - v + s - 1) / s;
    shard_plan_t *plan = calloc(nv + nt, sizeof *plan);
    PTR_CHECK(plan);
    for (uint64_t i = 0; i < nv + nt; i++) {
        bool val = i < nv;
        uint64_t k = val ? i : i - nv, base = val ? 0 : v, end = val ? v : total;
        snprintf(plan[i].name, sizeof plan[i].name, "%s_%06llu.bin", val ? "val" : "train",
                 (unsigned long long)k);
        plan[i].val = val;
        plan[i].start = base + k * s;
        plan[i].count = (end - plan[i].start < s ? end - plan[i].start : s);
    }
    *n_val = v;
    *n_out = (int)(nv + nt);
    return plan;
}

/* Overlap of [a0, a1) and [b0, b1); returns its length and start in *o. */
static uint64_t overlap(uint64_t a0, uint64_t a1, uint64_t b0, uint64_t b1, uint64_t *o) {
    *o = a0 > b0 ? a0 : b0;
    uint64_t e = a1 < b1 ? a1 : b1;
    return e > *o ? e - *o : 0;
}

/* Shard s is written by rank s % P. Each round, every rank sends the parts of its tokens that
 * fall in the round's shards to their writers, and each writer assembles and writes its one. */
static void write_round(prep_t *p, const shard_plan_t *plan, int first, int n, const uint64_t *off,
                        char *buf, uint8_t (*sha)[32]) {
    const size_t w_bytes = (size_t)p->width;
    const MPI_Datatype id_type = p->width == 4 ? MPI_UINT32_T : MPI_UINT16_T;
    const char *tokens = p->tokens;
    MPI_Request *req = calloc((size_t)(n + p->size), sizeof *req);
    PTR_CHECK(req);
    int nr = 0, mine = -1;
    for (int s = first; s < first + n; s++) {
        int w = s % p->size;
        const shard_plan_t *sp = &plan[s];
        uint64_t at, len;
        for (int r = 0; r < p->size; r++) {
            if (r != p->rank && w != p->rank) continue;
            len = overlap(sp->start, sp->start + sp->count, off[r], off[r + 1], &at);
            if (len == 0 || (r == p->rank && w == p->rank)) {
                if (len)
                    memcpy(buf + (at - sp->start) * w_bytes, tokens + (at - off[r]) * w_bytes,
                           len * w_bytes);
                continue;
            }
            if (r == p->rank) /* my part of someone else's shard */
                MPI_CHECK(MPI_Isend(tokens + (at - off[r]) * w_bytes, (int)len, id_type, w, 7,
                                    MPI_COMM_WORLD, &req[nr++]));
            else
                MPI_CHECK(MPI_Irecv(buf + (at - sp->start) * w_bytes, (int)len, id_type, r, 7,
                                    MPI_COMM_WORLD, &req[nr++]));
        }
        if (w == p->rank) mine = s;
    }
    MPI_CHECK(MPI_Waitall(nr, req, MPI_STATUSES_IGNORE));
    free(req);
    if (mine < 0) return;
    char path[4096];
    snprintf(path, sizeof path, "%s/%s", p->o.out, plan[mine].name);
    if ((p->width == 4 ? shard_write_u32(path, (const uint32_t *)buf, plan[mine].count)
                       : shard_write(path, (const uint16_t *)buf, plan[mine].count)) != 0)
        fatal_user_here("%s: cannot write: %s", path, strerror(errno));
    shard_sha256(path, sha[mine]);
}

/* Remove shards of an earlier run that this run's numbering does not reach, so that a
 * 'train_*.bin' pattern finds exactly this output. */
static void remove_stale(const prep_t *p, const char *split, int from) {
    char path[4096];
    for (int k = from;; k++) {
        snprintf(path, sizeof path, "%s/%s_%06d.bin", p->o.out, split, k);
        if (unlink(path) != 0) break;
        printf("removed %s (left from an earlier run)\n", path);
    }
}

/* ------------------------------------------------------------------ manifest */

typedef struct totals {
    uint64_t tokens, val, docs;
    int n_shards;
} totals_t;

/* DIR/manifest.json through atomic_file_* (tmp, fsync, rename, fsync of DIR): a crash never
 * leaves a manifest that is cut short or describes shards only half written. */
static void write_manifest(const prep_t *p, const shard_plan_t *plan, const totals_t *t,
                           uint8_t (*sha)[32]) {
    char path[1024];
    snprintf(path, sizeof path, "%s/manifest.json", p->o.out); /* --out is <= 900 bytes */
    atomic_file_t af;
    if (atomic_file_open(&af, path) != 0)
        fatal_user_here("%s: cannot write: %s", af.tmp[0] ? af.tmp : path, strerror(errno));
    FILE *f = af.f;
    fprintf(f, "{\n  \"format\": \"llm.c token shards: 256 x int32 header (magic %d, version %d, "
            "token count), then uint%d tokens\",\n", SHARD_MAGIC,
            p->width == 4 ? SHARD_VERSION_U32 : SHARD_VERSION_U16, 8 * p->width);
    fprintf(f, "  \"shard_version\": %d,\n", p->width == 4 ? SHARD_VERSION_U32 : SHARD_VERSION_U16);
    fprintf(f, "  \"tokenizer\": \"%s\",\n  \"tokenizer_kind\": \"%s\",\n  \"tokenizer_source\": ",
            tokenizer_file_name(p->tok), tokenizer_kind(p->tok));
    if (p->o.train_vocab) fprintf(f, "\"trained here: --train-vocab %u\",\n", p->o.train_vocab);
    else json_write_string(f, p->o.tokenizer), fputs(",\n", f);
    fprintf(f, "  \"vocab_size\": %u,\n  \"eot_token\": %u,\n", tokenizer_vocab_size(p->tok),
            tokenizer_eot(p->tok));
    fprintf(f, "  \"doc_separator\": ");
    if (p->o.sep_len) json_write_string(f, p->o.sep_arg);
    else fputs("null", f);
    fprintf(f, ",\n  \"documents\": %llu,\n  \"total_tokens\": %llu,\n  \"train_tokens\": %llu,\n"
            "  \"val_tokens\": %llu,\n  \"val_fraction\": %.10g,\n  \"shard_tokens\": %llu,\n",
            (unsigned long long)t->docs, (unsigned long long)t->tokens,
            (unsigned long long)(t->tokens - t->val), (unsigned long long)t->val,
            p->o.val_fraction, (unsigned long long)p->o.shard_tokens);
    fputs("  \"files\": [", f);
    for (int i = 0; i < p->o.n_files; i++) {
        fputs(i ? ",\n    {\"path\": " : "\n    {\"path\": ", f);
        json_write_string(f, p->o.files[i]);
        fprintf(f, ", \"bytes\": %llu}", (unsigned long long)p->file_bytes[i]);
    }
    fputs("\n  ],\n  \"shards\": [", f);
    for (int s = 0; s < t->n_shards; s++) {
        fprintf(f, "%s\n    {\"file\": \"%s\", \"split\": \"%s\", \"tokens\": %llu, \"sha256\": \"",
                s ? "," : "", plan[s].name, plan[s].val ? "val" : "train",
                (unsigned long long)plan[s].count);
        for (int k = 0; k < 32; k++) fprintf(f, "%02x", sha[s][k]);
        fputs("\"}", f);
    }
    fputs("\n  ]\n}\n", f);
    if (atomic_file_commit(&af) != 0) /* checks every write, the flush, fsync and close */
        fatal_user_here("%s: cannot write: %s", path, strerror(errno));
}

/* Exchange counts, write every shard, then the manifest. */
static totals_t write_output(prep_t *p) {
    totals_t t = {0};
    uint64_t *off = calloc((size_t)p->size + 1, sizeof *off), mine = p->n_tokens, docs = p->n_docs;
    PTR_CHECK(off);
    MPI_CHECK(MPI_Allgather(&mine, 1, MPI_UINT64_T, off + 1, 1, MPI_UINT64_T, MPI_COMM_WORLD));
    MPI_CHECK(MPI_Allreduce(&docs, &t.docs, 1, MPI_UINT64_T, MPI_SUM, MPI_COMM_WORLD));
    for (int r = 0; r < p->size; r++) off[r + 1] += off[r];
    t.tokens = off[p->size];
    if (t.tokens == 0) fatal_user("no documents in the input (only separators?)");
    shard_plan_t *plan = plan_shards(p, t.tokens, &t.val, &t.n_shards);
    uint8_t(*sha)[32] = calloc((size_t)t.n_shards, 32), (*all)[32] = calloc((size_t)t.n_shards, 32);
    char *buf = malloc((p->o.shard_tokens < t.tokens ? p->o.shard_tokens : t.tokens) * (size_t)p->width);
    PTR_CHECK(sha);
    PTR_CHECK(all);
    PTR_CHECK(buf);
    for (int s = 0; s < t.n_shards; s += p->size)
        write_round(p, plan, s, t.n_shards - s < p->size ? t.n_shards - s : p->size, off, buf, sha);
    MPI_CHECK(MPI_Reduce(sha, all, t.n_shards * 32, MPI_UNSIGNED_CHAR, MPI_BOR, 0, MPI_COMM_WORLD));
    if (p->rank == 0) {
        int nv = 0;
        while (nv < t.n_shards && plan[nv].val) nv++;
        remove_stale(p, "val", nv);
        remove_stale(p, "train", t.n_shards - nv);
        write_manifest(p, plan, &t, all);
    }
    free(buf);
    free(sha);
    free(all);
    free(plan);
    free(off);
    return t;
}

/* ------------------------------------------------------------------ main */

static void release(prep_t *p) {
    for (int i = 0; p->maps && i < p->o.n_files; i++)
        if (p->maps[i]) munmap((void *)p->maps[i], p->file_bytes[i]);
    free(p->maps);
    free(p->docs);
    free(p->tokens);
    free(p->file_bytes);
    free(p->file_start);
    tokenizer_destroy(p->tok);
}

int main(int argc, char **argv) {
    error_set_program_name("llmprep");
    MPI_CHECK(MPI_Init(&argc, &argv));
    prep_t p = {0};
    MPI_CHECK(MPI_Comm_rank(MPI_COMM_WORLD, &p.rank));
    MPI_CHECK(MPI_Comm_size(MPI_COMM_WORLD, &p.size));
    double t0 = now_sec();
    parse_options(&p.o, argc, argv, p.rank);
    check_inputs(&p);
    find_docs(&p);
    load_tokenizer(&p);
    encode_docs(&p);
    totals_t t = write_output(&p);
    if (p.rank == 0) {
        double dt = now_sec() - t0;
        printf("%d files, %llu documents, %.2f MB -> %llu tokens (train %llu, val %llu) "
               "in %d shards, %.1f s (%.1f MB/s on %d ranks) -> %s\n",
               p.o.n_files, (unsigned long long)t.docs, (double)p.total_bytes / 1e6,
               (unsigned long long)t.tokens, (unsigned long long)(t.tokens - t.val),
               (unsigned long long)t.val, t.n_shards, dt, (double)p.total_bytes / 1e6 / dt, p.size,
               p.o.out);
    }
    release(&p);
    MPI_CHECK(MPI_Finalize());
    return 0;
}
