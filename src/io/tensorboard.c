/* tensorboard.c — TensorBoard event files (see tensorboard.h). The protobuf messages are
 * encoded by hand; field numbers from tensorboard/compat/proto (event.proto, summary.proto,
 * tensor.proto, tensor_shape.proto, types.proto):
 *   Event           wall_time 1 (double), step 2 (int64), file_version 3 (string), summary 5
 *   Summary         value 1 (repeated Value)
 *   Value           tag 1 (string), simple_value 2 (float), tensor 8 (TensorProto),
 *                   metadata 9 (SummaryMetadata)
 *   SummaryMetadata plugin_data 1 (PluginData: plugin_name 1)
 *   TensorProto     dtype 1 (DT_STRING = 7), tensor_shape 2 (empty: a scalar), string_val 8 */
#include "io/tensorboard.h"
#include <errno.h>
#include <math.h>
#include <stdbool.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>
#include <unistd.h>
#include "core/alloc.h"
#include "core/timer.h"

/* ---- CRC-32C and framing ----------------------------------------------------------------- */

uint32_t tb_crc32c(const void *data, size_t n) {
    static uint32_t table[256]; /* filled once; the same values whichever thread fills it */
    static int ready;
    if (!ready) {
        for (uint32_t i = 0; i < 256; i++) {
            uint32_t c = i;
            for (int k = 0; k < 8; k++) c = c & 1 ? (c >> 1) ^ 0x82F63B78u : c >> 1;
            table[i] = c;
        }
        ready = 1;
    }
    const uint8_t *p = data;
    uint32_t crc = 0xFFFFFFFFu;
    for (size_t i = 0; i < n; i++) crc = table[(crc ^ p[i]) & 0xFF] ^ (crc >> 8);
    return crc ^ 0xFFFFFFFFu;
}

uint32_t tb_mask_crc(uint32_t crc) { return ((crc >> 15) | (crc << 17)) + 0xa282ead8u; }

static void put_le(uint8_t *out, uint64_t v, int bytes) {
    for (int i = 0; i < bytes; i++) out[i] = (uint8_t)(v >> (8 * i));
}

void tb_frame(uint8_t *out, const uint8_t *data, size_t n) {
    put_le(out, n, 8);
    put_le(out + 8, tb_mask_crc(tb_crc32c(out, 8)), 4);
    memcpy(out + 12, data, n);
    put_le(out + 12 + n, tb_mask_crc(tb_crc32c(data, n)), 4);
}

size_t tb_varint(uint8_t out[10], uint64_t v) {
    size_t n = 0;
    while (v >= 0x80) {
        out[n++] = (uint8_t)(v | 0x80);
        v >>= 7;
    }
    out[n++] = (uint8_t)v;
    return n;
}

/* ---- a protobuf writer ------------------------------------------------------------------- */

typedef struct pb {
    uint8_t *b;
    size_t n, cap;
} pb_t;

enum { WIRE_VARINT = 0, WIRE_FIXED64 = 1, WIRE_LEN = 2, WIRE_FIXED32 = 5 };

static void pb_raw(pb_t *p, const void *d, size_t n) {
    if (p->n + n > p->cap) {
        p->cap = 2 * (p->n + n) + 64;
        p->b = xrealloc_small(p->b, p->cap);
    }
    if (n) memcpy(p->b + p->n, d, n);
    p->n += n;
}

static void pb_uint(pb_t *p, uint64_t v) {
    uint8_t tmp[10];
    const size_t n = tb_varint(tmp, v);
    pb_raw(p, tmp, n < sizeof tmp ? n : sizeof tmp); /* (at most 10: the bound is for gcc) */
}

static void pb_key(pb_t *p, int field, int wire) { pb_uint(p, (uint64_t)field << 3 | (uint64_t)wire); }

static void pb_len(pb_t *p, int field, const void *d, size_t n) {
    pb_key(p, field, WIRE_LEN);
    pb_uint(p, n);
    pb_raw(p, d, n);
}

static void pb_str(pb_t *p, int field, const char *s) { pb_len(p, field, s, strlen(s)); }

/* A fixed-width field: the low `bytes` (8 or 4) bytes of bits, little-endian. */
static void pb_fixed(pb_t *p, int field, uint64_t bits, int bytes) {
    uint8_t le[8];
    put_le(le, bits, bytes);
    pb_key(p, field, bytes == 8 ? WIRE_FIXED64 : WIRE_FIXED32);
    pb_raw(p, le, (size_t)bytes);
}

static void pb_double(pb_t *p, int field, double x) {
    uint64_t bits;
    memcpy(&bits, &x, 8);
    pb_fixed(p, field, bits, 8);
}

static void pb_float(pb_t *p, int field, float x) {
    uint32_t bits;
    memcpy(&bits, &x, 4);
    pb_fixed(p, field, bits, 4);
}

/* A nested message: its bytes are complete, append them as field `field`. */
static void pb_msg(pb_t *p, int field, pb_t *sub) {
    pb_len(p, field, sub->b, sub->n);
    free(sub->b);
    *sub = (pb_t){0};
}

/* ---- our own flat JSON ------------------------------------------------------------------- */

typedef enum { JV_NUM, JV_BOOL, JV_NULL, JV_STR, JV_RAW } jv_kind_t;

typedef struct jmember {
    char *key;
    jv_kind_t kind;
    double num;  /* JV_NUM, JV_BOOL (0/1) */
    char *str;   /* JV_STR: decoded; JV_RAW: the array's or object's JSON text */
} jmember_t;

static const char *skip_ws(const char *s) {
    while (*s == ' ' || *s == '\t' || *s == '\n' || *s == '\r') s++;
    return s;
}

static void put_utf8(pb_t *o, unsigned cp) {
    uint8_t u[4];
    size_t n;
    if (cp < 0x80) u[0] = (uint8_t)cp, n = 1;
    else if (cp < 0x800) u[0] = (uint8_t)(0xC0 | cp >> 6), u[1] = (uint8_t)(0x80 | (cp & 0x3F)), n = 2;
    else if (cp < 0x10000)
        u[0] = (uint8_t)(0xE0 | cp >> 12), u[1] = (uint8_t)(0x80 | (cp >> 6 & 0x3F)),
        u[2] = (uint8_t)(0x80 | (cp & 0x3F)), n = 3;
    else
        u[0] = (uint8_t)(0xF0 | cp >> 18), u[1] = (uint8_t)(0x80 | (cp >> 12 & 0x3F)),
        u[2] = (uint8_t)(0x80 | (cp >> 6 & 0x3F)), u[3] = (uint8_t)(0x80 | (cp & 0x3F)), n = 4;
    pb_raw(o, u, n);
}

static int hex4(const char *s, unsigned *v) {
    *v = 0;
    for (int i = 0; i < 4; i++) {
        char c = s[i];
        int d = c >= '0' && c <= '9' ? c - '0' : c >= 'a' && c <= 'f' ? c - 'a' + 10
              : c >= 'A' && c <= 'F' ? c - 'A' + 10 : -1;
        if (d < 0) return -1;
        *v = *v << 4 | (unsigned)d;
    }
    return 0;
}

/* A JSON string at *s (at its opening quote): decoded into a malloc'ed *out; NULL on error. */
static const char *parse_string(const char *s, char **out) {
    pb_t o = {0};
    if (*s++ != '"') return NULL;
    for (; *s != '"'; s++) {
        if (!*s || (unsigned char)*s < 0x20) goto bad;
        if (*s != '\\') { pb_raw(&o, s, 1); continue; }
        const char *esc = "\"\\/bfnrt", *val = "\"\\/\b\f\n\r\t", *at = strchr(esc, *++s);
        unsigned cp, lo;
        if (*s && at) { pb_raw(&o, val + (at - esc), 1); continue; }
        if (*s != 'u' || hex4(s + 1, &cp)) goto bad;
        s += 4;
        if (cp >= 0xD800 && cp < 0xDC00 && s[1] == '\\' && s[2] == 'u' && !hex4(s + 3, &lo) &&
            lo >= 0xDC00 && lo < 0xE000) {
            cp = 0x10000 + ((cp - 0xD800) << 10) + (lo - 0xDC00);
            s += 6;
        }
        put_utf8(&o, cp);
    }
    pb_raw(&o, "", 1);
    *out = (char *)o.b;
    return s + 1;
bad:
    free(o.b);
    return NULL;
}

/* An array or object at *s, skipped (strings inside may hold brackets); its end or NULL. */
static const char *skip_nested(const char *s) {
    int depth = 0;
    do {
        if (*s == '"') {
            char *tmp;
            if (!(s = parse_string(s, &tmp))) return NULL;
            free(tmp);
            continue;
        }
        if (!*s) return NULL;
        if (*s == '[' || *s == '{') depth++;
        else if (*s == ']' || *s == '}') depth--;
        s++;
    } while (depth > 0);
    return s;
}

static const char *parse_value(const char *s, jmember_t *m) {
    if (*s == '"') {
        m->kind = JV_STR;
        return parse_string(s, &m->str);
    }
    if (*s == '[' || *s == '{') {
        const char *end = skip_nested(s);
        if (!end) return NULL;
        m->kind = JV_RAW;
        m->str = strndup(s, (size_t)(end - s));
        return end;
    }
    static const struct { const char *word; jv_kind_t kind; double num; } words[] = {
        {"true", JV_BOOL, 1}, {"false", JV_BOOL, 0}, {"null", JV_NULL, 0}};
    for (size_t i = 0; i < 3; i++)
        if (!strncmp(s, words[i].word, strlen(words[i].word))) {
            m->kind = words[i].kind;
            m->num = words[i].num;
            return s + strlen(words[i].word);
        }
    if (*s != '-' && (*s < '0' || *s > '9')) return NULL;
    char *end;
    m->kind = JV_NUM;
    m->num = strtod(s, &end);
    return end;
}

static void free_members(jmember_t *m, int n) {
    for (int i = 0; i < n; i++) {
        free(m[i].key);
        free(m[i].str);
    }
    free(m);
}

/* `{"k":v,...}` into a malloc'ed array of *n members; NULL when it is not such an object. */
static jmember_t *parse_object(const char *s, int *n) {
    int cap = 0;
    jmember_t *m = NULL;
    *n = 0;
    s = skip_ws(s);
    if (*s++ != '{') return NULL;
    s = skip_ws(s);
    while (s && *s != '}') {
        if (*n == cap) m = xrealloc_small(m, sizeof *m * (size_t)(cap = 2 * cap + 16));
        jmember_t *x = &m[(*n)++];
        memset(x, 0, sizeof *x);
        if (!(s = parse_string(s, &x->key))) break;
        s = skip_ws(s);
        if (*s++ != ':') { s = NULL; break; }
        if (!(s = parse_value(skip_ws(s), x))) break;
        s = skip_ws(s);
        if (*s == ',') s = skip_ws(s + 1);
        else if (*s != '}') s = NULL;
    }
    if (!s || *skip_ws(s + 1) != '\0') {
        free_members(m, *n);
        return NULL;
    }
    return m ? m : xrealloc_small(NULL, sizeof *m);
}

/* ---- events ------------------------------------------------------------------------------ */

static void event_header(pb_t *ev, double wall_time, int64_t step) {
    pb_double(ev, 1, wall_time);
    if (step) {
        pb_key(ev, 2, WIRE_VARINT);
        pb_uint(ev, (uint64_t)step);
    }
}

uint8_t *tb_encode_file_version(double wall_time, size_t *len) {
    pb_t ev = {0};
    event_header(&ev, wall_time, 0);
    pb_str(&ev, 3, "brain.Event:2");
    *len = ev.n;
    return ev.b;
}

/* Summary.Value with a text: a scalar DT_STRING tensor tagged for the text plugin. */
static void text_value(pb_t *value, const char *text) {
    pb_t tensor = {0}, shape = {0}, meta = {0}, plugin = {0};
    pb_key(&tensor, 1, WIRE_VARINT);
    pb_uint(&tensor, 7); /* DT_STRING */
    pb_msg(&tensor, 2, &shape);
    pb_str(&tensor, 8, text);
    pb_msg(value, 8, &tensor);
    pb_str(&plugin, 1, "text");
    pb_msg(&meta, 1, &plugin);
    pb_msg(value, 9, &meta);
}

static void add_value(pb_t *summary, const char *prefix, const jmember_t *m) {
    pb_t value = {0};
    char tag[256];
    snprintf(tag, sizeof tag, "%s%s%s", prefix ? prefix : "", prefix ? "/" : "", m->key);
    pb_str(&value, 1, tag);
    if (m->kind == JV_NUM || m->kind == JV_BOOL) pb_float(&value, 2, (float)m->num);
    else text_value(&value, m->str);
    pb_msg(summary, 1, &value);
}

uint8_t *tb_encode_record(const char *json, double wall_time, size_t *len) {
    int n;
    jmember_t *m = parse_object(json, &n);
    *len = 1;
    if (!m) return NULL;
    const jmember_t *step = NULL;
    const char *kind = NULL;
    for (int i = 0; i < n; i++) {
        if (!strcmp(m[i].key, "step") && m[i].kind == JV_NUM) step = &m[i];
        if (!strcmp(m[i].key, "kind") && m[i].kind == JV_STR) kind = m[i].str;
    }
    *len = 0;
    if (!step) {
        free_members(m, n);
        return NULL;
    }
    pb_t summary = {0}, ev = {0};
    for (int i = 0; i < n; i++)
        if (&m[i] != step && !(kind && m[i].str == kind) && m[i].kind != JV_NULL)
            add_value(&summary, kind, &m[i]);
    event_header(&ev, wall_time, (int64_t)step->num);
    pb_msg(&ev, 5, &summary);
    free_members(m, n);
    *len = ev.n;
    return ev.b;
}

/* ---- the file ---------------------------------------------------------------------------- */

/* One record, framed, in one fwrite, then flushed. */
static int write_framed(tb_writer_t *tb, const uint8_t *data, size_t n) {
    uint8_t *rec = xrealloc_small(NULL, n + 16);
    tb_frame(rec, data, n);
    errno = 0;
    int ok = fwrite(rec, 1, n + 16, tb->f) == n + 16 && fflush(tb->f) == 0;
    free(rec);
    if (!ok && errno == 0) errno = EIO;
    return ok ? 0 : -1;
}

int tb_open(tb_writer_t *tb, const char *dir) {
    memset(tb, 0, sizeof *tb);
    char host[256] = "localhost";
    if (gethostname(host, sizeof host - 1) != 0) snprintf(host, sizeof host, "localhost");
    host[sizeof host - 1] = '\0';
    const double now = wall_sec();
    snprintf(tb->path, sizeof tb->path, "%s/events.out.tfevents.%lld.%s", dir, (long long)now, host);
    FILE *f = fopen(tb->path, "wx");
    if (!f && errno == EEXIST) { /* a second start within the same second: one file each */
        snprintf(tb->path, sizeof tb->path, "%s/events.out.tfevents.%lld.%s.%d", dir,
                 (long long)now, host, (int)getpid());
        f = fopen(tb->path, "wx");
    }
    if (!f) return -1;
    tb->f = f;
    size_t n;
    uint8_t *ev = tb_encode_file_version(now, &n);
    int rc = write_framed(tb, ev, n);
    free(ev);
    return rc;
}

int tb_write_record(tb_writer_t *tb, const char *json, double wall_time) {
    if (!tb->f) return 0;
    size_t n;
    uint8_t *ev = tb_encode_record(json, wall_time, &n);
    if (!ev) return n ? -2 : 0;
    int rc = write_framed(tb, ev, n);
    free(ev);
    return rc;
}

void tb_close(tb_writer_t *tb) {
    if (tb->f) fclose(tb->f); /* every record was flushed when written */
    tb->f = NULL;
}
