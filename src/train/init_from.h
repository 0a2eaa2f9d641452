/* init_from.h — &run init_from: another run's weights as the start of this one, at the
 * namelist's context length. The model keys must match the namelist's (io/checkpoint checks
 * them) except seq_len, which fine-tuning changes:
 *  - learned positions (wpe), file longer than the namelist: the table is cropped to its first
 *    seq_len rows (nanoGPT's crop_block_size) and rank 0 prints a note saying so;
 *  - learned positions, file shorter: refused naming seq_len and both values (positions the
 *    file never learned have no rows);
 *  - RoPE (no wpe): any seq_len; rope_theta is the namelist's (a note names the file's when its
 *    recorded namelist differs).
 * Resume (&run resume) keeps the strict check of io/checkpoint: a run continues as it was.
 * Owns: that rule. Uses: io/checkpoint, config/ (the namelist parser for the file's text),
 * parallel/comm_host. Used by: train/trainer_setup. */
#ifndef LLMT_INIT_FROM_H
#define LLMT_INIT_FROM_H
#include <mpi.h>
#include <stddef.h>
#include "config/config.h"
#include "io/checkpoint.h"

/* Collective over comm: read cfg->init_from's /model through io (group 0: each rank its range
 * [io->lo[0], io->hi[0]) of the flat local layout of P, `total` floats, piece by piece through
 * io's staging buffer, to where io's callbacks put it: train/flat's flat_load_io), checked
 * against the namelist's model as above. 0, or -1 with one message in msg on every rank (the
 * model may then be half loaded). tp_comm and ep_comm as ckpt_load_io takes them. */
int init_from_load(const config_t *cfg, MPI_Comm comm, MPI_Comm tp_comm, MPI_Comm ep_comm,
                   const ckpt_tensors_t *P, size_t total, ckpt_io_t *io, char *msg, size_t len);
#endif
