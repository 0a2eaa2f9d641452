/* tokenizer_spm.cc — the extern "C" shim over the SentencePiece library (tokenizer_spm.h):
 * SentencePieceProcessor does the loading, normalising, encoding and decoding; this file only
 * converts between its C++ types and plain C buffers. No exception crosses into C: the library
 * reports through util::Status, and the few standard-library calls that could throw are inside
 * try blocks. Uses: the SentencePiece library (Debian libsentencepiece-dev). */
#include "io/tokenizer_spm.h"
#include <sentencepiece_processor.h>
#include <cstdio>
#include <new>
#include <string>
#include <vector>

struct spm {
    sentencepiece::SentencePieceProcessor proc;
    std::vector<int> ids;
    std::string text;
    std::string kind;
};

/* One protobuf varint at p (< end); advances p; false when cut short. */
static bool read_varint(const unsigned char *&p, const unsigned char *end, uint64_t *v) {
    *v = 0;
    for (int shift = 0; p < end && shift < 64; shift += 7) {
        unsigned char b = *p++;
        *v |= (uint64_t)(b & 0x7f) << shift;
        if (!(b & 0x80)) return true;
    }
    return false;
}

/* The first field `field` of wire type `want` in [p, end): its varint value or its bytes. */
static bool proto_field(const unsigned char *p, const unsigned char *end, uint64_t field,
                        int want, uint64_t *val, const unsigned char **sub, size_t *sub_len) {
    while (p < end) {
        uint64_t key, v;
        if (!read_varint(p, end, &key)) return false;
        int wt = (int)(key & 7);
        if (wt == 0) {
            if (!read_varint(p, end, &v)) return false;
            if ((key >> 3) == field && want == 0) return *val = v, true;
        } else if (wt == 2) {
            if (!read_varint(p, end, &v) || v > (uint64_t)(end - p)) return false;
            if ((key >> 3) == field && want == 2) return *sub = p, *sub_len = (size_t)v, true;
            p += v;
        } else if (wt == 1 || wt == 5) {
            p += wt == 1 ? 8 : 4;
        } else {
            return false;
        }
    }
    return false;
}

/* ModelProto.trainer_spec (field 2).model_type (field 3): 1 unigram (the default), 2 bpe,
 * 3 word, 4 char; read from the file, as the library's headers do not expose ModelProto. */
static int model_type(const char *path) {
    FILE *f = fopen(path, "rb");
    if (!f) return 0;
    std::string buf;
    char chunk[65536];
    size_t got;
    while ((got = fread(chunk, 1, sizeof chunk, f)) > 0) buf.append(chunk, got);
    fclose(f);
    const unsigned char *p = (const unsigned char *)buf.data(), *spec;
    size_t spec_len;
    uint64_t t = 1;
    if (!proto_field(p, p + buf.size(), 2, 2, nullptr, &spec, &spec_len)) return 1;
    if (!proto_field(spec, spec + spec_len, 3, 0, &t, nullptr, nullptr)) return 1;
    return (int)t;
}

extern "C" spm_t *spm_open(const char *path, char *err, size_t errlen) {
    spm *s = new (std::nothrow) spm;
    if (!s) {
        snprintf(err, errlen, "%s: out of memory", path);
        return nullptr;
    }
    try {
        auto st = s->proc.Load(path);
        if (!st.ok()) {
            snprintf(err, errlen, "%s: not a SentencePiece model the library reads: %s", path,
                     st.ToString().c_str());
            delete s;
            return nullptr;
        }
        static const char *names[] = {"?", "unigram", "bpe", "word", "char"};
        int t = model_type(path);
        s->kind = names[t >= 1 && t <= 4 ? t : 0];
    } catch (const std::exception &e) {
        snprintf(err, errlen, "%s: %s", path, e.what());
        delete s;
        return nullptr;
    }
    return s;
}

extern "C" void spm_close(spm_t *s) { delete s; }

extern "C" uint32_t spm_n_ids(const spm_t *s) { return (uint32_t)s->proc.GetPieceSize(); }
extern "C" int spm_bos(const spm_t *s) { return s->proc.bos_id(); }
extern "C" int spm_eos(const spm_t *s) { return s->proc.eos_id(); }
extern "C" const char *spm_kind(const spm_t *s) { return s->kind.c_str(); }

extern "C" const char *spm_piece(const spm_t *s, uint32_t id, size_t *len) {
    const std::string &p = s->proc.IdToPiece((int)id);
    *len = p.size();
    return p.data();
}

extern "C" int spm_is_byte(const spm_t *s, uint32_t id) { return s->proc.IsByte((int)id); }
extern "C" int spm_is_control(const spm_t *s, uint32_t id) {
    return s->proc.IsControl((int)id) || s->proc.IsUnknown((int)id);
}

extern "C" int spm_encode(spm_t *s, const char *text, size_t len, const int **ids, size_t *n,
                          char *err, size_t errlen) {
    try {
        s->ids.clear();
        auto st = s->proc.Encode(absl::string_view(text, len), &s->ids);
        if (!st.ok()) {
            snprintf(err, errlen, "SentencePiece cannot encode: %s", st.ToString().c_str());
            return -1;
        }
    } catch (const std::exception &e) {
        snprintf(err, errlen, "SentencePiece cannot encode: %s", e.what());
        return -1;
    }
    *ids = s->ids.data();
    *n = s->ids.size();
    return 0;
}

extern "C" const char *spm_decode(spm_t *s, const uint32_t *ids, size_t n, size_t *len) {
    try {
        std::vector<int> v(n);
        int size = s->proc.GetPieceSize();
        for (size_t i = 0; i < n; i++) {
            if (ids[i] >= (uint32_t)size) return nullptr;
            v[i] = (int)ids[i];
        }
        s->text.clear();
        if (!s->proc.Decode(v, &s->text).ok()) return nullptr;
    } catch (const std::exception &) {
        return nullptr;
    }
    *len = s->text.size();
    return s->text.data();
}
