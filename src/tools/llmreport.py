#!/usr/bin/env python3
"""llmreport — what happened in one llmtrain run, or how several runs compare: plots and a
summary as one Markdown file or one self-contained HTML page.

    ./llmreport RUN_DIR                     report on one run (written to RUN_DIR/report.md)
    ./llmreport RUN_DIR... --out FILE       FILE ends in .md (plots beside it in FILE_files/) or
                                            .html (the same plots embedded: one file to mail)

With several run directories the report opens with a comparison: final train and validation
loss, median tokens/s and MFU, energy when recorded, the namelist keys whose values differ, and
the loss curves overlaid; a section per run follows.

What it reads in a run directory (RUN_DIR is &run out_dir/name):
  metrics.jsonl  required. Step records (loss, lr, grad_norm, ms, tokens_per_s, mfu, rss_mib,
                 peak_mib, the communication waits ms_tp / ms_pp_wait / ms_dp_wait, energy_j and
                 any member whose name holds "energy"), validation records (val_loss), checkpoint
                 and weights records, stop records (stopped_by), event records ("event": anomaly,
                 restart, stage, ...), provenance records ("kind": "provenance"), end-of-run
                 records (energy_run_j, emissions_g, papi_totals_rank). A torn last line (a killed
                 run) is skipped. A resumed or rolled-back run appends: every step appears once,
                 from its last occurrence — records marked "superseded": true are left out (events
                 among them are listed as superseded), {"event":"restart","step":N} (or
                 "from_step":N) drops the records after step N, and a step record whose step is
                 not past the previous one supersedes the records from that step on.
  run.json       optional: provenance (commit, build, hosts, ...) and the effective namelist
                 (member "config": the namelist text; or a {group: {key: value}} object).
  trace.json     optional: Chrome trace events (pid = rank, "cat" the phase): per rank, busy
                 time (the union of its events other than the "step" frames; communication, cat
                 "comm", apart from the rest) and idle time (the rest of its steps); per event
                 name, the total and mean.
  *.h5           the effective namelist stored in the newest checkpoint or weights file (h5py),
                 when run.json has none; else a "config" / "namelist" member of a metrics record.

Why Python and not C like the rest of llmtrain: this program reads small text files after a run
and draws plots; nothing in it is on the training path or performance-critical, and matplotlib
(Debian's python3-matplotlib, with numpy) draws what would be thousands of lines of C. It reuses
the tools' reader of llmtrain's namelist grammar (src/tools/nml.py). Without matplotlib the
report is written without plots, and says so.

Exit codes: 0 the report was written; 2 bad input (a directory without metrics.jsonl, an output
name that is neither .md nor .html, an output that cannot be written): one message naming it.

The code, beside this file: report_runs.py (reading a run directory, the summary numbers),
report_doc.py (Markdown and HTML), report_plots.py (matplotlib); this file is the command line.
"""

import os
import re
import sys

sys.dont_write_bytecode = True  # no __pycache__ in src/tools
sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
from report_runs import (Run, summarize, UserError)  # noqa: E402
from report_doc import (comparison_blocks, render_html, render_markdown, run_blocks, run_label)  # noqa: E402
from report_plots import (compare_plots, load_pyplot, run_plots)  # noqa: E402

EXIT_OK, EXIT_USER = 0, 2
USAGE = "usage: llmreport RUN_DIR... [--out report.md | report.html]"


# ---------------------------------------------------------------------------------------------
# The program
# ---------------------------------------------------------------------------------------------

def parse_args(args):
    dirs, out = [], None
    i = 0
    while i < len(args):
        a = args[i]
        if a == "--out":
            if i + 1 >= len(args):
                raise UserError("--out needs a file name (report.md or report.html)")
            out, i = args[i + 1], i + 2
            continue
        if a.startswith("--out="):
            out = a[len("--out="):]
        elif a.startswith("-"):
            raise UserError("unknown option %s\n%s" % (a, USAGE))
        else:
            dirs.append(a)
        i += 1
    if not dirs:
        raise UserError("no run directory given\n" + USAGE)
    if out is None:
        out = os.path.join(dirs[0], "report.md") if len(dirs) == 1 else "report.md"
    if not out.lower().endswith((".md", ".html", ".htm")):
        raise UserError("--out %s: the report is Markdown (.md) or HTML (.html)" % out)
    return dirs, out


def _labels(runs):
    """Each run's directory name, or its path where two runs share a name."""
    names = [os.path.basename(os.path.normpath(r.dir)) for r in runs]
    for r, n in zip(runs, names):
        r.label = n if names.count(n) == 1 else os.path.normpath(r.dir)


def _folder_name(label):
    return re.sub(r"[^A-Za-z0-9._-]+", "_", label).strip("_") or "run"


def write_report(dirs, out):
    runs = [Run(d) for d in dirs]
    _labels(runs)
    sums = [summarize(r) for r in runs]
    plt, why = load_pyplot()
    files = os.path.splitext(out)[0] + "_files"
    is_html = out.lower().endswith((".html", ".htm"))
    try:
        os.makedirs(os.path.dirname(os.path.abspath(out)), exist_ok=True)
        blocks = [("h", 1, "llmtrain report: " + ", ".join(run_label(r) for r in runs))]
        if why:
            blocks.append(("p", why))
        if len(runs) > 1:
            cmp_plots = compare_plots(plt, runs, files) if plt else []
            blocks += comparison_blocks(runs, sums, cmp_plots)
        n_plots = 0
        for i, (r, s) in enumerate(zip(runs, sums)):
            folder = files if len(runs) == 1 else \
                os.path.join(files, "%d_%s" % (i + 1, _folder_name(run_label(r))))
            plots = run_plots(plt, r, folder) if plt else []
            n_plots += len(plots)
            blocks += run_blocks(r, s, plots, 2)
        text = render_html(blocks, blocks[0][2]) if is_html else render_markdown(blocks, out)
        tmp = out + ".tmp"
        with open(tmp, "w", encoding="utf-8") as f:
            f.write(text)
        os.replace(tmp, out)
    except OSError as e:
        raise UserError("%s: cannot write the report: %s" % (e.filename or out, e.strerror or e))
    return out, files if plt else None, why


def main(argv):
    args = argv[1:]
    if args and args[0] in ("-h", "--help"):
        print(__doc__.split("\nWhy Python")[0].strip())
        return EXIT_OK
    try:
        dirs, out = parse_args(args)
        out, files, why = write_report(dirs, out)
    except UserError as e:
        print("llmreport: %s" % e, file=sys.stderr, flush=True)
        return EXIT_USER
    if why:
        print("llmreport: %s" % why)
    print("llmreport: wrote %s%s" % (out, " (plots in %s/)" % files if files else ""))
    return EXIT_OK


if __name__ == "__main__":
    sys.exit(main(sys.argv))
