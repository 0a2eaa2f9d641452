/* json.c — the one JSON string writer (see json.h). */
#include "core/json.h"
#include <stdio.h>
#include <string.h>

/* The escape of one byte into e (at most 6 characters and a NUL); its length. */
static size_t escape_byte(unsigned char c, char e[8]) {
    if (c == '"' || c == '\\') return (size_t)snprintf(e, 8, "\\%c", c);
    if (c == '\n') return (size_t)snprintf(e, 8, "\\n");
    if (c < 0x20) return (size_t)snprintf(e, 8, "\\u%04x", c);
    e[0] = (char)c, e[1] = '\0';
    return 1;
}

size_t json_escape(char *buf, size_t size, const char *s) {
    size_t need = 0, written = 0;
    for (; *s; s++) {
        char e[8];
        const size_t n = escape_byte((unsigned char)*s, e);
        if (written == need && need + n < size) { /* nothing left out yet, and it fits */
            memcpy(buf + written, e, n);
            written += n;
        }
        need += n;
    }
    if (size > 0) buf[written] = '\0';
    return need;
}

void json_write_string(FILE *out, const char *s) {
    fputc('"', out);
    for (; *s; s++) {
        char e[8];
        fwrite(e, 1, escape_byte((unsigned char)*s, e), out);
    }
    fputc('"', out);
}
