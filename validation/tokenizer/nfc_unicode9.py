"""nfc_unicode9.py — prints the C table of tokenizer_hfbpe.c's characters NFC treats differently
since Unicode 9.0: the `tokenizers` library's NFC (the unicode-normalization-alignments crate)
has Unicode 9.0's tables, libutf8proc those of a later Unicode (2.8: 15.0).

A character assigned after 9.0 is, to the library, unassigned: a starter (combining class 0)
without decomposition that composes with nothing. Those whose NFC properties say otherwise in
libutf8proc (a combining class other than 0, a canonical decomposition, or a part of the
decomposition of another such character) are listed; llmtrain copies them as they are and
normalizes each side apart, which is what the library does. Ages come from Perl's Unicode::UCD,
the NFC properties from libutf8proc (ctypes). validation/e2e/tokenizer_hf.sh checks the result:
every code point below U+20000 in three contexts, ids identical to the library's.
usage: python3 nfc_unicode9.py"""
import bisect
import ctypes
import subprocess


def ages():
    """(range starts, their ages): Perl's inversion map of the Age property"""
    out = subprocess.run(["perl", "-MUnicode::UCD=prop_invmap", "-e",
                          'my ($l, $m) = prop_invmap("Age"); print "$l->[$_] $m->[$_]\\n" '
                          'for 0 .. $#$l'], capture_output=True, text=True, check=True).stdout
    starts, values = [], []
    for line in out.splitlines():
        a, b = line.split()
        starts.append(int(a))
        values.append(None if b == "Unassigned" else tuple(int(x) for x in b.split(".")))
    return starts, values


class Prop(ctypes.Structure):  # the first fields of utf8proc_property_t
    _fields_ = [("category", ctypes.c_int16), ("combining_class", ctypes.c_int16)]


def main():
    starts, values = ages()
    lib = ctypes.CDLL("libutf8proc.so")
    libc = ctypes.CDLL(None)
    lib.utf8proc_get_property.restype = ctypes.POINTER(Prop)
    lib.utf8proc_NFD.restype = ctypes.c_void_p
    lib.utf8proc_unicode_version.restype = ctypes.c_char_p

    def after9(c):  # assigned after Unicode 9.0 (unknown to Perl: later still)
        a = values[bisect.bisect_right(starts, c) - 1]
        return a is None or a > (9, 0)

    def nfd(c):
        p = lib.utf8proc_NFD(chr(c).encode())
        s = ctypes.string_at(p).decode()
        libc.free(ctypes.c_void_p(p))
        return s

    table = set()
    for c in range(1, 0x110000):
        if 0xD800 <= c < 0xE000 or not after9(c):
            continue
        p = lib.utf8proc_get_property(c).contents
        if p.category == 0:  # unassigned to libutf8proc too
            continue
        d = nfd(c)
        if p.combining_class != 0 or d != chr(c):
            table.add(c)
            table.update(ord(x) for x in d if after9(ord(x)))
    cps = sorted(table)
    print(f"/* {len(cps)} code points (libutf8proc {lib.utf8proc_unicode_version().decode()}; "
          "validation/tokenizer/nfc_unicode9.py) */")
    for i in range(0, len(cps), 10):
        print("    " + " ".join(f"0x{c:05X}," for c in cps[i:i + 10]))


if __name__ == "__main__":
    main()
