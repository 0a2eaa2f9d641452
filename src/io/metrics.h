/* metrics.h — machine-readable run metrics: one JSON object per line (JSONL) in the run
 * directory, written by rank 0 and flushed every line so a killed job keeps its history; and,
 * when enabled, the same records as TensorBoard events (io/tensorboard: every record written
 * here is handed to it, so the two cannot differ). Uses: io/tensorboard, core/. Used by: train/. */
#ifndef LLMT_METRICS_H
#define LLMT_METRICS_H
#include <stdbool.h>
#include <stdio.h>
#include "io/tensorboard.h"

typedef struct metrics {
    FILE *f; /* NULL when disabled or not rank 0 */
    char path[512];
    tb_writer_t tb;     /* tb.f NULL when TensorBoard is off or not rank 0 */
    bool tb_warned;     /* a TensorBoard write failed (said once; the JSONL goes on) */
} metrics_t;

/* Open `path` for appending when enabled (a file is never truncated: a resumed or restarted run
 * adds to it, see metrics_supersede_after). 0, or -1 with errno (the caller reports it: only the
 * writing rank knows). */
int metrics_open(metrics_t *mx, const char *path, int enabled);
/* Before a run continues from step `step` in an existing file: every record with a "step" member
 * greater than `step` (written by an earlier attempt that got further than its last checkpoint)
 * gets "superseded":true as its first member, so each step appears once in what tools read
 * (those records are kept, not deleted). A torn last line (a killed writer) is ended with a
 * newline. The file is rewritten atomically, only when something changes. Returns the number of
 * records marked (0 when the file does not exist), or -1 with errno. */
long metrics_supersede_after(const char *path, long long step);
/* The same for the open file (a rollback to `step` inside a run): closed, marked, reopened for
 * appending (TensorBoard's file is left as it is). Marked count, or -1 with errno (then no
 * more JSONL records are written). */
long metrics_supersede_open(metrics_t *mx, long long step);
/* After metrics_open: also write every record as TensorBoard events into `dir` (which exists).
 * A run adds a new event file there (the older ones are kept, like the JSONL history;
 * TensorBoard reads a directory's files in order). 0, or -1 with errno. */
int metrics_open_tensorboard(metrics_t *mx, const char *dir);
/* Append one line: `fmt` formats the object's members without braces, e.g. "\"step\":%d". */
void metrics_write(metrics_t *mx, const char *fmt, ...) __attribute__((format(printf, 2, 3)));
void metrics_close(metrics_t *mx);
/* JSON has no NaN/Inf: write those as null. Returns a static-per-call buffer in `buf`. */
const char *metrics_num(char *buf, size_t len, double x);
#endif
