"""report_doc — llmreport's document: blocks (headings, tables, images, notes) for one run or a
comparison (the differing namelist keys), rendered as Markdown or self-contained HTML.
Uses: report_runs. Used by: report_plots, llmreport.
"""

import base64
import html
import json
import os

from report_runs import (fmt, fmt_unit, loss_text)


# ---------------------------------------------------------------------------------------------
# The document: blocks rendered as Markdown or HTML
# ---------------------------------------------------------------------------------------------

def run_label(run):
    return getattr(run, "label", None) or os.path.basename(os.path.normpath(run.dir))


def _value_text(v):
    if v is None:
        return "(unset)"
    if isinstance(v, bool):
        return ".true." if v else ".false."
    if isinstance(v, tuple):
        return ", ".join(_value_text(x) for x in v)
    if isinstance(v, str):
        return "'%s'" % v
    return str(v)


def differing_keys(runs):
    """The namelist keys whose values differ between the runs that have a namelist."""
    known = [r for r in runs if r.namelist]
    if len(known) < 2:
        return []
    keys = sorted(set().union(*[r.namelist for r in known]))
    return [k for k in keys if len({repr(r.namelist.get(k)) for r in known}) > 1]


def _provenance_rows(run):
    rows = []
    for k, v in (run.run_json or {}).items():
        if isinstance(v, list) and all(isinstance(x, (str, int, float)) for x in v):
            v = ", ".join(str(x) for x in v)
        if isinstance(v, (str, int, float)) and not isinstance(v, bool) and len(str(v)) <= 200 \
                and "\n" not in str(v):
            rows.append(["run.json: " + k, str(v)])
    return rows


def summary_rows(run, s):
    rows = [["steps", fmt(s["steps"])],
            ["final train loss", loss_text(s["final_loss"])],
            ["lowest train loss", fmt(s["min_loss"])],
            ["final validation loss", loss_text(s["final_val_loss"])
             + (" (step %s)" % s["val_step"] if s["val_step"] is not None else "")],
            ["lowest validation loss", fmt(s["min_val_loss"])],
            ["tokens seen", fmt(s["tokens"])],
            ["tokens/s (median)", fmt(s["tok_s"], 1)],
            ["MFU (median)", fmt_unit(100.0 * s["mfu"], 2, " %")],
            ["ms per step (median)", fmt(s["ms"], 1)],
            ["training time (sum of step times)", fmt_unit(s["train_s"], 1, " s")],
            ["peak memory, rank 0", fmt_unit(s["peak_mib"], 1, " MiB")],
            ["skipped steps", fmt(s["skipped"])]]
    for k, v in s["split"].items():
        rows.append(["mean %s per step" % k, fmt_unit(v, 2, " ms")])
    for k, (total, how) in s["energy"].items():
        rows.append(["%s (%s)" % (k, {"cumulative": "last value", "run": "end of run"}.get(how, "sum over steps")),
                     fmt(total)])
    if s["stopped_by"]:
        rows.append(["stopped by", s["stopped_by"]])
    rows.append(["namelist from", run.namelist_source or "(none found)"])
    return rows + _provenance_rows(run)


def _events_rows(run):
    rows = []
    records = run.h.events + run.h.restarts + [c for c in run.h.checkpoints if c.get("failed")]
    for r in sorted(records, key=lambda r: r.get("step") if isinstance(r.get("step"), int) else -1):
        what = r.get("event") or ("checkpoint failed" if "checkpoint" in r else "weights failed" if "weights" in r
                                  else next((k for k in r if k != "step"), "record"))
        rest = {k: v for k, v in r.items() if k not in ("step", "event", "superseded")}
        rows.append([fmt(r.get("step")), str(what), json.dumps(rest)[:300]])
    return rows


def trace_blocks(tr):
    if not tr:
        return []
    out = [("h", 3, "Trace (trace.json)"),
           ("p", "Span of the trace: %.1f ms. Busy: the union of a rank's events other than the step frames "
                 "(communication: the part in comm events — waits, all-reduces, sends, receives; compute: the "
                 "rest); idle: the rest of the rank's steps (of the whole span without step frames)."
            % tr["span_ms"]),
           ("table", ["rank", "events", "busy ms", "idle ms", "busy %", "compute ms", "comm ms", "process"],
            [[str(r["rank"]), str(r["events"]), fmt(r["busy_ms"], 1), fmt(r["idle_ms"], 1), fmt(r["busy_pct"], 1),
              fmt(r["compute_ms"], 1), fmt(r["comm_ms"], 1), r["name"]] for r in tr["ranks"]]),
           ("table", ["event", "count", "total ms", "mean ms", "ranks"],
            [[n["name"], str(n["count"]), fmt(n["total_ms"], 1), fmt(n["mean_ms"], 3), str(n["ranks"])]
             for n in tr["names"][:30]])]
    return out


def run_blocks(run, s, plots, level):
    blocks = [("h", level, "Run %s" % run_label(run)), ("p", "Directory: %s" % run.dir)]
    blocks += [("p", "Note: " + n) for n in run.notes]
    blocks.append(("table", ["", "value"], summary_rows(run, s)))
    ev = _events_rows(run)
    if ev:
        blocks += [("h", level + 1, "Events"), ("table", ["step", "event", "details"], ev)]
    if run.h.totals:
        blocks += [("h", level + 1, "End-of-run records"),
                   ("table", ["step", "record"], [[fmt(r.get("step")), json.dumps({k: v for k, v in r.items()
                                                                                    if k != "step"})[:400]]
                                                  for r in run.h.totals])]
    blocks += trace_blocks(run.trace)
    blocks += [("img", title, path) for title, path in plots]
    return blocks


def comparison_blocks(runs, sums, plots):
    head = ["run", "steps", "final loss", "final val loss", "lowest val loss", "tokens/s (median)", "MFU (median)",
            "peak MiB"]
    energy_keys = sorted(set().union(*[s["energy"].keys() for s in sums]))
    head += energy_keys
    rows = []
    for r, s in zip(runs, sums):
        rows.append([run_label(r), fmt(s["steps"]), loss_text(s["final_loss"]), loss_text(s["final_val_loss"]),
                     fmt(s["min_val_loss"]), fmt(s["tok_s"], 1),
                     fmt_unit(100.0 * s["mfu"], 2, " %"), fmt(s["peak_mib"], 1)]
                    + [fmt(s["energy"][k][0]) if k in s["energy"] else "–" for k in energy_keys])
    blocks = [("h", 2, "Comparison"), ("table", head, rows)]
    diff = differing_keys(runs)
    missing = [run_label(r) for r in runs if not r.namelist]
    if diff:
        blocks += [("h", 3, "Namelist keys that differ"),
                   ("table", ["key"] + [run_label(r) for r in runs],
                    [[k] + [_value_text(r.namelist.get(k)) if r.namelist else "(no namelist)" for r in runs]
                     for k in diff])]
    elif len(runs) - len(missing) >= 2:
        blocks.append(("p", "The namelists of these runs do not differ."))
    if missing:
        blocks.append(("p", "No namelist found for: %s (no run.json, no checkpoint or weights file "
                            "with its configuration)." % ", ".join(missing)))
    blocks += [("img", title, path) for title, path in plots]
    return blocks


def _md_cell(text):
    return str(text).replace("|", "\\|").replace("\n", " ")


def render_markdown(blocks, out_path):
    base = os.path.dirname(os.path.abspath(out_path))
    lines = []
    for b in blocks:
        if b[0] == "h":
            lines += ["#" * b[1] + " " + b[2], ""]
        elif b[0] == "p" and b[1]:
            lines += [b[1], ""]
        elif b[0] == "table":
            lines.append("| " + " | ".join(_md_cell(c) for c in b[1]) + " |")
            lines.append("|" + "|".join("---" for _ in b[1]) + "|")
            lines += ["| " + " | ".join(_md_cell(c) for c in row) + " |" for row in b[2]]
            lines.append("")
        elif b[0] == "img":
            lines += ["![%s](%s)" % (b[1], os.path.relpath(b[2], base)), ""]
    return "\n".join(lines)


def render_html(blocks, title):
    parts = ["<!DOCTYPE html>\n<html><head><meta charset=\"utf-8\"><title>%s</title>" % html.escape(title),
             "<style>body{font-family:sans-serif;max-width:60em;margin:1em auto;padding:0 1em}"
             "table{border-collapse:collapse;margin:0.5em 0}td,th{border:1px solid #bbb;padding:2px 8px;"
             "text-align:left}img{max-width:100%}</style></head><body>"]
    for b in blocks:
        if b[0] == "h":
            parts.append("<h%d>%s</h%d>" % (b[1], html.escape(b[2]), b[1]))
        elif b[0] == "p" and b[1]:
            parts.append("<p>%s</p>" % html.escape(b[1]))
        elif b[0] == "table":
            parts.append("<table><tr>%s</tr>" % "".join("<th>%s</th>" % html.escape(str(c)) for c in b[1]))
            parts += ["<tr>%s</tr>" % "".join("<td>%s</td>" % html.escape(str(c)) for c in row) for row in b[2]]
            parts.append("</table>")
        elif b[0] == "img":
            with open(b[2], "rb") as f:
                data = base64.b64encode(f.read()).decode("ascii")
            parts.append("<figure><img alt=\"%s\" src=\"data:image/png;base64,%s\"></figure>"
                         % (html.escape(b[1]), data))
    parts.append("</body></html>\n")
    return "\n".join(parts)
