/* init_from.c — &run init_from at another context length (see init_from.h).
 * The crop reads the file's whole position table, so its checksum is verified as written, into
 * rows appended after the flat layout (a copy of the tensor list whose wpe has the file's
 * shape), then keeps its first seq_len rows. Everything else is ckpt_load_io's, unchanged: each
 * rank reads only its range, through the caller's staging buffer. */
#include "train/init_from.h"
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include "config/namelist.h"
#include "core/alloc.h"
#include "core/error.h"
#include "parallel/comm_host.h"

/* The file's &model seq_len and rope_theta (0 when absent or unreadable), read by rank 0 and
 * broadcast: every rank then takes the same branch. A file rank 0 cannot read gives 0, and
 * ckpt_load's own message. */
static void file_positions(const char *path, MPI_Comm comm, int *seq_len, double *rope_theta) {
    int rank;
    double v[2] = {0, 0};
    MPI_CHECK(MPI_Comm_rank(comm, &rank));
    if (rank == 0) {
        hid_t file;
        ckpt_file_meta_t meta;
        char err[512];
        if (ckpt_file_open(path, "&run init_from", &file, &meta, err, sizeof err) == 0) {
            v[0] = meta.seq_len;
            char *text = ckpt_file_config(file);
            namelist_t nl;
            if (text[0] && namelist_parse(path, text, &nl, err, sizeof err) == 0) {
                for (int g = 0; g < nl.n_groups; g++)
                    for (int e = 0; strcmp(nl.groups[g].name, "model") == 0 && e < nl.groups[g].n_entries; e++)
                        if (strcmp(nl.groups[g].entries[e].key, "rope_theta") == 0)
                            v[1] = nl.groups[g].entries[e].values[0].r;
                namelist_free(&nl);
            }
            xfree(text);
            H5Fclose(file);
        }
    }
    comm_bcast(v, 2, MPI_DOUBLE, 0, comm, "init_from");
    *seq_len = (int)v[0];
    *rope_theta = v[1];
}

/* Index of the tensor named `name` in P, or -1. */
static int tensor_index(const ckpt_tensors_t *P, const char *name) {
    for (int i = 0; i < P->n; i++)
        if (strcmp(P->t[i].name, name) == 0) return i;
    return -1;
}

/* The crop's view of the caller's io: the file's whole position table is read into `table`
 * (elements from `total` on, after the flat layout), everything else goes to the caller's io. */
typedef struct crop {
    ckpt_io_t *inner;
    size_t total;
    float *table;
} crop_t;

static float *crop_dest(void *ctx, int g, size_t a, size_t b, float *staging) {
    crop_t *c = ctx;
    if (a >= c->total) return c->table + (a - c->total);
    return c->inner->dest ? c->inner->dest(c->inner->ctx, g, a, b, staging) : NULL;
}

static void crop_store(void *ctx, int g, size_t a, size_t b, const float *buf) {
    crop_t *c = ctx;
    if (a < c->total && c->inner->store) c->inner->store(c->inner->ctx, g, a, b, buf);
}

/* Elements [a, b) of the flat layout from buf through io, as a load would put them. */
static void put_range(ckpt_io_t *io, size_t a, size_t b, const float *buf) {
    if (a >= b) return;
    float *d = io->dest ? io->dest(io->ctx, 0, a, b, io->staging) : NULL;
    if (d) memcpy(d, buf, (b - a) * sizeof(float));
    if (io->store) io->store(io->ctx, 0, a, b, d ? d : buf);
}

/* Load with wpe read at the file's length T_file, then keep its first cfg->seq_len rows. The
 * table is read whole (its checksum covers all rows) by one rank of the partition group: the one
 * whose range ends the layout, extended over the table; the kept rows then go to the ranks whose
 * ranges hold the model's wpe. */
static int load_cropped(const config_t *cfg, MPI_Comm comm, MPI_Comm tp_comm, MPI_Comm ep_comm,
                        const ckpt_tensors_t *P, size_t total, ckpt_io_t *io, int iw, int T_file,
                        ckpt_meta_t *want, char *msg, size_t len) {
    ckpt_tensors_t wide = *P;
    wide.t = xmalloc((size_t)P->n * sizeof *wide.t);
    memcpy(wide.t, P->t, (size_t)P->n * sizeof *wide.t);
    ckpt_tensor_t *w = &wide.t[iw];
    const size_t C = (size_t)cfg->d_model, kept = (size_t)cfg->seq_len * C, rows = (size_t)T_file * C;
    const bool here = w->numel > 0; /* the first stage holds the table */
    ASSERT(w->split_dim < 0 && w->experts == 0 && w->nblk <= 1); /* replicated [T, C] */
    w->shape[0] = T_file;
    wide.n_global += (int64_t)(T_file - cfg->seq_len) * (int64_t)C;
    if (here) {
        w->count[0][0] = T_file;
        w->numel = rows;
        w->offset = total;
    }
    crop_t c = {.inner = io, .total = total, .table = xcalloc(rows, sizeof(float))};
    ckpt_io_t view = *io;
    view.dest = crop_dest;
    view.store = crop_store;
    view.ctx = &c;
    const bool reads_table = here && io->lo[0] < io->hi[0] && io->hi[0] == total;
    if (reads_table) view.hi[0] = total + rows;
    want->seq_len = T_file;
    int rc = ckpt_load_io(cfg->init_from, comm, tp_comm, ep_comm, &wide, &view, 1, NULL, want, NULL,
                          msg, len);
    io->peak_rss_mib = view.peak_rss_mib;
    if (rc == 0 && here) {
        const MPI_Comm pc = io->part_comm[0];
        if (pc != MPI_COMM_SELF) { /* the reader's kept rows to the others of its group */
            int me, root;
            MPI_CHECK(MPI_Comm_rank(pc, &me));
            root = reads_table ? me : -1;
            comm_allreduce(&root, 1, MPI_INT, MPI_MAX, pc, "init_from");
            comm_bcast(c.table, (int)kept, MPI_FLOAT, root, pc, "init_from");
        }
        const size_t off = P->t[iw].offset;
        const size_t a = off > io->lo[0] ? off : io->lo[0];
        const size_t b = off + kept < io->hi[0] ? off + kept : io->hi[0];
        if (a < b) put_range(io, a, b, c.table + (a - off));
    }
    xfree(c.table);
    xfree(wide.t);
    return rc;
}

int init_from_load(const config_t *cfg, MPI_Comm comm, MPI_Comm tp_comm, MPI_Comm ep_comm,
                   const ckpt_tensors_t *P, size_t total, ckpt_io_t *io, char *msg, size_t len) {
    ckpt_meta_t want = {0, cfg->seed, cfg->vocab_size, config_padded_vocab(cfg), cfg->n_layer,
                        cfg->n_head, cfg->d_model, cfg->d_ff, cfg->seq_len, NULL, "", NULL};
    int T_file, rank;
    double theta_file;
    file_positions(cfg->init_from, comm, &T_file, &theta_file);
    MPI_CHECK(MPI_Comm_rank(comm, &rank));
    const int iw = tensor_index(P, "wpe");
    if (T_file <= 0 || T_file == cfg->seq_len) /* the same length, or ckpt_load's message */
        return ckpt_load_io(cfg->init_from, comm, tp_comm, ep_comm, P, io, 1, NULL, &want, NULL, msg,
                            len);
    if (iw < 0) { /* RoPE: no table, any length */
        if (rank == 0 && theta_file > 0 && theta_file != cfg->rope_theta)
            printf("init_from: %s was trained with rope_theta = %g; this run uses the namelist's "
                   "rope_theta = %g\n", cfg->init_from, theta_file, cfg->rope_theta);
        if (rank == 0)
            printf("init_from: %s was written for seq_len = %d; RoPE has no position table: "
                   "training at seq_len = %d\n", cfg->init_from, T_file, cfg->seq_len);
        want.seq_len = T_file;
        return ckpt_load_io(cfg->init_from, comm, tp_comm, ep_comm, P, io, 1, NULL, &want, NULL, msg,
                            len);
    }
    if (T_file < cfg->seq_len)
        return errf(msg, len, "checkpoint %s was written for &model seq_len = %d, shorter than the "
                    "namelist's seq_len = %d: its learned position table (wpe) has no rows for "
                    "positions %d..%d; use seq_len <= %d (or a model with pos = 'rope')",
                    cfg->init_from, T_file, cfg->seq_len, T_file, cfg->seq_len - 1, T_file);
    int rc = load_cropped(cfg, comm, tp_comm, ep_comm, P, total, io, iw, T_file, &want, msg, len);
    if (rc == 0 && rank == 0)
        printf("init_from: %s has learned positions for seq_len = %d: the position table (wpe) "
               "is cropped from %d to %d positions\n", cfg->init_from, T_file, T_file,
               cfg->seq_len);
    return rc;
}
