/* fault.h — fault injection for the test suite: a named point in the code where one rank stops
 * itself (SIGSTOP), as a hung node or a stuck file system would stop it, so the scenario tests
 * can show that every blocking wait is watched; or where a signal reaches it at exactly that
 * moment (a SIGTERM during setup, a SIGUSR1 during a save). Inactive unless the environment
 * says so:
 *   LLMT_FAULT="<point>@<world rank>[:<action>][,...]"     e.g. LLMT_FAULT=resume@1
 * action: stop (default: SIGSTOP), term (SIGTERM), usr1 (SIGUSR1), kill (SIGKILL), fsizeN (from
 * here on the file size limit is N bytes, as `ulimit -f` would set it, so writes beyond it fail
 * with EFBIG inside the real I/O stack: set after MPI_Init, whose shared-memory segments would
 * not fit), sleepN (sleep N milliseconds each time the point is passed: a slow rank, or steps
 * of a known length).
 * Points: startup (right after MPI_Init), setup (after the namelist, before the grid), data
 * (before the data files are checked), resume (before a checkpoint's tensors are read), save
 * (before a checkpoint's tensors are written: with &checkpoint async, on the background writer
 * while the next step trains), snapshot (before an asynchronous save copies the rank's state
 * into its snapshot: inside the step that saves), weights (before a weights file is written), step
 * (before the stop-signal check at the end of a step), compute (inside a step, before the
 * micro-batches' forward and backward: with sleepN a straggler, busy while the others wait for
 * it), stats (before the end-of-run gather),
 * generate (before a generated token's logits are gathered).
 * Uses: libc. Used by: main, train/, io/. Costs one string compare per call when active, a
 * cached flag when not. */
#ifndef LLMT_FAULT_H
#define LLMT_FAULT_H
/* Act here if LLMT_FAULT names `point` for this world rank. */
void fault_point(const char *point, int world_rank);
#endif
