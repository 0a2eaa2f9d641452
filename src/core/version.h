/* version.h — the one definition of llmtrain's version string (printed by --version, written
 * into every checkpoint and weights file). Uses: nothing. */
#ifndef LLMT_VERSION_H
#define LLMT_VERSION_H
#define LLMT_VERSION "0.3.0"
#endif
