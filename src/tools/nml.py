"""nml — llmtrain's namelist syntax for the Python tools: the reader (exactly the grammar of
src/config/namelist.c: groups, strings, logicals, numbers, repeat counts, comments) and the writer
that replaces values in a namelist's text with its comments and layout kept.

One module for llmsweep, llmscale, merge_trial, llmreport, llmconvert and the Python scripts under
validation/: a change to the grammar is made here once. Standard library only.

    n = read_namelist_file("input.nml")           # or parse_namelist(path, text)
    namelist_value(n, "train", "lr", 3e-4)        # the last value given to &train lr
    namelist_with(n, {("train", "lr"): 1e-3})     # the text with that value replaced
    namelist_dict(n)                              # {group: {key: value}}, the last value wins

Errors are UserError('path:line:col: message'), the message llmtrain's reader would give.
"""
import difflib
import math


class UserError(Exception):
    """Bad input: each tool prints it once as '<tool>: <message>' and exits with code 2."""


# ---------------------------------------------------------------------------------------------
# The namelist reader: the grammar of src/config/namelist.c, plus (in groups named in
# `extended`) dotted keys and the space expressions log(..) uniform(..) int(..) {..}.
# Every value keeps its position (line, col) and its character span, so the writer can replace
# exactly the text of a value.
# ---------------------------------------------------------------------------------------------

class NlValue:
    def __init__(self, kind, value, raw, line, col, start, end):
        self.kind, self.value, self.raw = kind, value, raw  # integer real string logical space
        self.line, self.col, self.start, self.end = line, col, start, end


class NlEntry:
    def __init__(self, key, line, col):
        self.key, self.line, self.col = key, line, col
        self.values = []

    @property
    def span(self):
        return self.values[0].start, self.values[-1].end


class NlGroup:
    def __init__(self, name, line, col):
        self.name, self.line, self.col = name, line, col
        self.entries = []
        self.close = None  # offset of the closing '/' or '&end'


class Namelist:
    def __init__(self, path, text, groups):
        self.path, self.text, self.groups = path, text, groups

    def group(self, name):
        """The last group of that name (None if absent)."""
        found = [g for g in self.groups if g.name == name]
        return found[-1] if found else None


_SPACE_FUNCS = ("log", "uniform", "real", "int", "logint")
NL_MAX_REPEAT = 100000


class _Lexer:
    def __init__(self, path, text, extended):
        self.path, self.text, self.extended = path, text, extended
        self.i, self.line, self.col = 0, 1, 1
        self.in_extended = False

    def peek(self, k=0):
        j = self.i + k
        return self.text[j] if j < len(self.text) else ""

    def advance(self):
        if self.i >= len(self.text):
            return
        if self.text[self.i] == "\n":
            self.line, self.col = self.line + 1, 1
        else:
            self.col += 1
        self.i += 1

    def error(self, line, col, msg):
        return UserError("%s:%d:%d: %s" % (self.path, line, col, msg))

    def skip_to_eol(self):
        while self.peek() not in ("", "\n"):
            self.advance()

    def skip_space(self):
        while True:
            c = self.peek()
            if c and c in " \t\r\n\f\v":
                self.advance()
            elif c == "!":
                self.skip_to_eol()
            else:
                return

    def name_char(self, c):
        return c != "" and (c.isascii() and (c.isalnum() or c == "_" or (c == "." and self.in_extended)))

    def read_name(self):
        start = self.i
        while self.name_char(self.peek()):
            self.advance()
        return self.text[start:self.i].lower()

    def at_key(self):
        if not (self.peek().isascii() and self.peek().isalpha()):
            return False
        save = (self.i, self.line, self.col)
        while self.name_char(self.peek()):
            self.advance()
        self.skip_space()
        ok = self.peek() in ("=", "(")
        self.i, self.line, self.col = save
        return ok


def _describe(c):
    if c == "":
        return "end of file"
    if c == "\n":
        return "end of line"
    return "'%s'" % c if c.isprintable() else "byte 0x%02x" % ord(c)


def _ends_value(c):
    return c == "" or c in " \t\r\n\f\v,/!"


def _read_string(lx):
    line, col, start = lx.line, lx.col, lx.i
    quote = lx.peek()
    lx.advance()
    out = []
    while True:
        c = lx.peek()
        if c in ("", "\n"):
            raise lx.error(line, col, "unterminated string: missing closing %s before %s"
                           % (quote, "end of file" if c == "" else "end of line"))
        lx.advance()
        if c == quote:
            if lx.peek() != quote:
                break
            lx.advance()
        out.append(c)
    return NlValue("string", "".join(out), lx.text[start:lx.i], line, col, start, lx.i)


def _scan_number(lx):
    digits, is_real = 0, False
    if lx.peek() in ("+", "-"):
        lx.advance()
    while lx.peek().isdigit():
        lx.advance()
        digits += 1
    if lx.peek() == ".":
        is_real = True
        lx.advance()
        while lx.peek().isdigit():
            lx.advance()
            digits += 1
    if digits == 0:
        return None
    if lx.peek() and lx.peek() in "eEdD":
        is_real = True
        lx.advance()
        if lx.peek() in ("+", "-"):
            lx.advance()
        if not lx.peek().isdigit():
            return None
        while lx.peek().isdigit():
            lx.advance()
    return is_real


def _read_number(lx, stop_chars=""):
    line, col, start = lx.line, lx.col, lx.i
    is_real = _scan_number(lx)
    raw = lx.text[start:lx.i]
    if is_real is None:
        while lx.name_char(lx.peek()) or lx.peek() == ".":
            lx.advance()
        raise lx.error(line, col, "malformed number '%s'" % lx.text[start:lx.i])
    if not (_ends_value(lx.peek()) or lx.peek() == "*" or lx.peek() in stop_chars):
        raise lx.error(lx.line, lx.col, "unexpected %s after number %s" % (_describe(lx.peek()), raw))
    if not is_real:
        v = int(raw)
        if not -2**63 <= v < 2**63:
            raise lx.error(line, col, "integer %s is out of range" % raw)
        return NlValue("integer", v, raw, line, col, start, lx.i)
    v = float(raw.replace("d", "e").replace("D", "e"))
    if math.isinf(v):
        raise lx.error(line, col, "real %s is out of range" % raw)
    return NlValue("real", v, raw, line, col, start, lx.i)


def _logical_word(w):
    return {"t": True, "true": True, "f": False, "false": False}.get(w)


def _starts_number(lx):
    c, c1 = lx.peek(), lx.peek(1)
    if c.isdigit():
        return True
    if c == ".":
        return c1.isdigit()
    if c in ("+", "-"):
        return c1.isdigit() or (c1 == "." and lx.peek(2).isdigit())
    return False


def _read_single(lx, key, stop_chars=""):
    """One value token (no repeat count); names inside it never hold dots (&space keys may)."""
    extended, lx.in_extended = lx.in_extended, False
    try:
        return _read_token(lx, key, stop_chars)
    finally:
        lx.in_extended = extended


def _read_token(lx, key, stop_chars):
    c = lx.peek()
    line, col, start = lx.line, lx.col, lx.i
    if c in ("'", '"'):
        return _read_string(lx)
    if _starts_number(lx):
        return _read_number(lx, stop_chars)
    if c == "." and lx.peek(1).isalpha():
        lx.advance()
        word = lx.read_name()
        closed = lx.peek() == "."
        if closed:
            lx.advance()
        raw = lx.text[start:lx.i]
        b = _logical_word(word) if closed else None
        if b is None:
            raise lx.error(line, col, "malformed logical '%s'; use .true. or .false." % raw)
        return NlValue("logical", b, raw, line, col, start, lx.i)
    if c.isascii() and c.isalpha():
        word = lx.read_name()
        raw = lx.text[start:lx.i]
        b = _logical_word(word)
        if b is not None:
            return NlValue("logical", b, raw, line, col, start, lx.i)
        raise lx.error(line, col, "unquoted word '%s' in the value of key '%s': strings need quotes "
                       "('%s'), logicals are .true./.false., and a new key needs '='" % (raw, key, raw))
    raise lx.error(line, col, "unexpected %s in the value of key '%s'" % (_describe(c), key))


def _expand_repeat(lx, e):
    counter = e.values.pop()
    rep = counter.raw + "*"
    if counter.kind != "integer" or not counter.raw[0].isdigit() or not 1 <= counter.value <= NL_MAX_REPEAT:
        raise lx.error(counter.line, counter.col,
                       "repeat count '%s' must be an integer in [1, %d]" % (rep, NL_MAX_REPEAT))
    lx.advance()
    if _ends_value(lx.peek()):
        raise lx.error(counter.line, counter.col, "repeat count '%s' must be followed by a value "
                       "(null values are not supported)" % rep)
    v = _read_single(lx, e.key)
    if lx.peek() == "*":
        raise lx.error(lx.line, lx.col, "a repeat count cannot be repeated")
    v.start, v.line, v.col = counter.start, counter.line, counter.col  # the span covers 'r*value'
    e.values.extend([v] * counter.value)


def _at_end_of_values(lx):
    c = lx.peek()
    if c in ("&", "$") and lx.peek(1).isalpha():
        return True
    return c in ("", "/") or lx.at_key()


def _parse_values(lx, e):
    after_comma = False
    while True:
        lx.skip_space()
        if lx.peek() == ",":
            if not e.values:
                raise lx.error(lx.line, lx.col, "missing value before ',' for key '%s'" % e.key)
            if after_comma:
                raise lx.error(lx.line, lx.col, "empty value between commas for key '%s' "
                               "(null values are not supported)" % e.key)
            after_comma = True
            lx.advance()
            continue
        if _at_end_of_values(lx):
            if not e.values:
                raise lx.error(e.line, e.col, "key '%s' has no value after '='" % e.key)
            return
        e.values.append(_read_single(lx, e.key))
        if lx.peek() == "*":
            _expand_repeat(lx, e)
        if not _ends_value(lx.peek()):
            raise lx.error(lx.line, lx.col, "unexpected %s after value %s of key '%s'"
                           % (_describe(lx.peek()), e.values[-1].raw, e.key))
        after_comma = False


def _parse_space_items(lx, e, close, what):
    """Values up to `close` separated by commas and/or blanks (no repeat counts)."""
    items = []
    while True:
        lx.skip_space()
        c = lx.peek()
        if c == close:
            lx.advance()
            return items
        if c == "," and items:
            lx.advance()
            lx.skip_space()
            if lx.peek() in (",", close):
                raise lx.error(lx.line, lx.col, "missing value in %s of key '%s'" % (what, e.key))
            continue
        if c in ("", "/"):
            raise lx.error(lx.line, lx.col, "%s of key '%s' is not closed by '%s'" % (what, e.key, close))
        items.append(_read_single(lx, e.key, stop_chars=close + ","))
        if lx.peek() == "*":
            raise lx.error(lx.line, lx.col, "repeat counts are not allowed in %s of key '%s'" % (what, e.key))


def _parse_space_value(lx, e):
    """One space expression: name(lo, hi) or {v1, v2, ...}."""
    lx.skip_space()
    line, col, start = lx.line, lx.col, lx.i
    c = lx.peek()
    if c == "{":
        lx.advance()
        items = _parse_space_items(lx, e, "}", "the choices {...}")
        value = ("choice", items)
    elif c.isascii() and c.isalpha():
        save = (lx.i, lx.line, lx.col)
        lx.in_extended = False
        name = lx.read_name()
        lx.in_extended = True
        if lx.peek() != "(":
            lx.i, lx.line, lx.col = save
            v = _read_single(lx, e.key)  # a logical, or the 'unquoted word' error
            raise lx.error(v.line, v.col, "key '%s' of &space needs a range or choices: log(lo, hi), "
                           "uniform(lo, hi), int(lo, hi), logint(lo, hi) or {v1, v2, ...}" % e.key)
        if name not in _SPACE_FUNCS:
            hint = difflib.get_close_matches(name, _SPACE_FUNCS, 1)
            raise lx.error(line, col, "unknown range '%s(...)' for key '%s' (valid: %s)%s"
                           % (name, e.key, ", ".join(_SPACE_FUNCS),
                              "; did you mean '%s'?" % hint[0] if hint else ""))
        lx.advance()
        items = _parse_space_items(lx, e, ")", "%s(...)" % name)
        value = (name, items)
    else:
        raise lx.error(line, col, "key '%s' of &space needs a range or choices: log(lo, hi), "
                       "uniform(lo, hi), int(lo, hi), logint(lo, hi) or {v1, v2, ...}" % e.key)
    e.values.append(NlValue("space", value, lx.text[start:lx.i], line, col, start, lx.i))
    lx.skip_space()
    if not _at_end_of_values(lx) and lx.peek() != ",":
        raise lx.error(lx.line, lx.col, "unexpected %s after the value of key '%s'" % (_describe(lx.peek()), e.key))
    if lx.peek() == ",":
        lx.advance()


def _parse_group_body(lx, g):
    while True:
        lx.skip_space()
        c = lx.peek()
        if c == "":
            raise lx.error(g.line, g.col, "group '&%s' is not closed by '/' (reached end of file)" % g.name)
        if c == "/":
            g.close = lx.i
            lx.advance()
            return
        if c in ("&", "$") and lx.peek(1).isalpha():
            line, col, at = lx.line, lx.col, lx.i
            lx.advance()
            save, lx.in_extended = lx.in_extended, False
            name = lx.read_name()
            lx.in_extended = save
            if name == "end":
                g.close = at
                return
            raise lx.error(line, col, "group '&%s' (line %d) is not closed by '/' before '%s%s'"
                           % (g.name, g.line, c, name))
        if not (c.isascii() and c.isalpha()):
            raise lx.error(lx.line, lx.col, "unexpected %s in group '&%s'; expected a key name, '/' or '&end'"
                           % (_describe(c), g.name))
        e = NlEntry(None, lx.line, lx.col)
        e.key = lx.read_name()
        lx.skip_space()
        c = lx.peek()
        if c == "(":
            raise lx.error(lx.line, lx.col, "indexed assignment '%s(...)' is not supported; give the whole "
                           "array: %s = v1, v2, ..." % (e.key, e.key))
        if c != "=":
            raise lx.error(lx.line, lx.col, "missing '=' after key '%s' in group '&%s' (found %s)"
                           % (e.key, g.name, _describe(c)))
        lx.advance()
        if lx.in_extended:
            _parse_space_value(lx, e)
        else:
            _parse_values(lx, e)
        g.entries.append(e)


def parse_namelist(path, text, extended=()):
    """Parse namelist text; raises UserError('path:line:col: ...')."""
    lx = _Lexer(path, text, extended)
    if text.startswith("\ufeff"):
        lx.i = 1
    groups = []
    while True:
        c = lx.peek()
        if c == "":
            return Namelist(path, text, groups)
        if c == "!":
            lx.skip_to_eol()
        elif c in ("&", "$") and lx.peek(1).isalpha():
            line, col = lx.line, lx.col
            lx.advance()
            name = lx.read_name()
            if name == "end":
                raise lx.error(line, col, "'%send' without an open group" % c)
            g = NlGroup(name, line, col)
            lx.in_extended = name in extended
            _parse_group_body(lx, g)
            lx.in_extended = False
            groups.append(g)
        else:
            lx.advance()


def read_namelist_file(path, extended=(), where=None):
    try:
        with open(path, encoding="utf-8", errors="surrogateescape") as f:
            text = f.read()
    except OSError as e:
        raise UserError("%s%s: %s" % (where + ": " if where else "", path, e.strerror or e))
    if len(text) > 16 << 20:
        raise UserError("%s:1:1: the namelist text is longer than 16 MiB; is this a namelist file?" % path)
    return parse_namelist(path, text, extended)


# ---- the writer ------------------------------------------------------------------------------

def format_value(v):
    """A Python value as llmtrain's namelist reads it."""
    if isinstance(v, bool):
        return ".true." if v else ".false."
    if isinstance(v, int):
        return str(v)
    if isinstance(v, float):
        if not math.isfinite(v):
            raise ValueError("non-finite value %r" % v)
        s = repr(v)
        return s if ("." in s or "e" in s) else s + ".0"
    if isinstance(v, str):
        if "\n" in v:
            raise ValueError("a namelist string cannot hold a newline")
        return "'" + v.replace("'", "''") + "'"
    raise ValueError("cannot write %r into a namelist" % (v,))


def namelist_with(nl, overrides, header=""):
    """The text of namelist `nl` with overrides {(group, key): value} applied: an existing key's
    values are replaced in place (every occurrence), a missing key is added before its group's
    '/', a missing group is appended. Comments and layout are kept."""
    text = nl.text
    edits = []  # (start, end, new text)
    pending = dict(overrides)
    for g in nl.groups:
        for e in g.entries:
            if (g.name, e.key) in overrides:
                start, end = e.span
                edits.append((start, end, format_value(overrides[(g.name, e.key)])))
                pending.pop((g.name, e.key), None)
    appended, inserts = [], {}
    for (group, key), value in pending.items():
        g = nl.group(group)
        line = "%s = %s" % (key, format_value(value))
        if g is None:
            appended.append((group, line))
        else:
            inserts.setdefault(g.close, []).append(line)
    for at, lines in inserts.items():
        before = "" if at == 0 or text[at - 1] == "\n" else "\n"
        edits.append((at, at, before + "".join("  %s\n" % ln for ln in lines)))
    edits.sort(key=lambda t: (t[0], t[1]), reverse=True)  # from the end: offsets stay valid
    for start, end, new in edits:
        text = text[:start] + new + text[end:]
    if appended:
        if text and not text.endswith("\n"):
            text += "\n"
        groups = {}
        for group, line in appended:
            groups.setdefault(group, []).append(line)
        for group, lines in groups.items():
            text += "&%s\n%s\n/\n" % (group, "\n".join("  " + ln for ln in lines))
    return header + text


def overrides_text(overrides):
    """'group.key = value, ...' of overrides {(group, key): value}, for a written namelist's header."""
    return ", ".join("%s.%s = %s" % (g, k, format_value(v)) for (g, k), v in overrides.items())


def namelist_value(nl, group, key, default=None):
    """The last value given to group.key in nl (a list when it has several values)."""
    found = default
    for g in nl.groups:
        if g.name != group:
            continue
        for e in g.entries:
            if e.key == key:
                vals = [v.value for v in e.values]
                found = vals[0] if len(vals) == 1 else vals
    return found


def namelist_dict(nl):
    """{group: {key: value}} of every group, repeated groups merged in order: the last value given
    to a key wins (a list when it has several values)."""
    out = {}
    for g in nl.groups:
        d = out.setdefault(g.name, {})
        for e in g.entries:
            vals = [v.value for v in e.values]
            d[e.key] = vals[0] if len(vals) == 1 else vals
    return out
