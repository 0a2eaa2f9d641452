/* config_json.c — the key table as one JSON object (llmtrain --keys; config.h says its members).
 * Tools (validation/fuzz/config_fuzz.py) read it, so a new key reaches them without an edit.
 * Uses: config_internal.h, core/json.h. */
#include "config/config.h"
#include "config/config_internal.h"
#include "core/json.h"
#include <stdio.h>
#include <string.h>

/* ---- the schema as JSON (llmtrain --keys) ------------------------------------------------- */

static const char *const type_names[] = {"int", "int64", "real", "string", "bool", "int_array"};


/* "a|b|c" as ["a", "b", "c"] (an empty alternative is ""). */
static void json_choices(FILE *out, const char *choices) {
    fputc('[', out);
    for (const char *p = choices;;) {
        const char *bar = strchr(p, '|');
        const size_t n = bar ? (size_t)(bar - p) : strlen(p);
        char one[64];
        snprintf(one, sizeof one, "%.*s", (int)n, p);
        json_write_string(out, one);
        if (!bar) break;
        fputs(", ", out);
        p = bar + 1;
    }
    fputc(']', out);
}

static void json_number(FILE *out, const key_spec_t *ks, double x) {
    if (ks->type == K_REAL) fprintf(out, "%.17g", x);
    else fprintf(out, "%.0f", x);
}

static void json_key(FILE *out, const key_spec_t *ks) {
    fprintf(out, "{\"group\": \"%s\", \"name\": \"%s\", \"type\": \"%s\", \"default\": ",
            cfg_group_names[ks->group], ks->key, type_names[ks->type]);
    switch (ks->type) {
    case K_STR: json_write_string(out, ks->def_str); break;
    case K_BOOL: fputs(ks->def != 0 ? "true" : "false", out); break;
    case K_INT_ARRAY: fputs("[]", out); break;
    default: json_number(out, ks, ks->def);
    }
    fputs(", \"min\": ", out);
    if (ks->lo_kind) json_number(out, ks, ks->lo); else fputs("null", out);
    fprintf(out, ", \"min_inclusive\": %s, \"max\": ", ks->lo_kind == '(' ? "false" : "true");
    if (ks->hi_kind) json_number(out, ks, ks->hi); else fputs("null", out);
    fprintf(out, ", \"max_inclusive\": %s, \"choices\": ", ks->hi_kind == ')' ? "false" : "true");
    if (ks->choices) json_choices(out, ks->choices); else fputs("null", out);
    fprintf(out, ", \"path\": %s", cfg_is_path_key(ks) ? "true" : "false");
    if (ks->type == K_STR) fprintf(out, ", \"max_length\": %zu", ks->size - 1);
    if (ks->type == K_INT_ARRAY) fprintf(out, ", \"array_length\": %zu", ks->size);
    fprintf(out, ", \"repeated_group\": %s", ks->group == G_STAGE ? "true" : "false");
    fputs(", \"planned\": ", out);
    if (ks->planned) json_choices(out, ks->planned); else fputs("null", out);
    fputs(", \"not_implemented\": ", out);
    if (ks->not_impl) json_write_string(out, ks->not_impl); else fputs("null", out);
    fputs(", \"why\": ", out);
    if (ks->why) json_write_string(out, ks->why); else fputs("null", out);
    fputc('}', out);
}

void config_keys_json(FILE *out) {
    fputs("{\"groups\": [", out);
    for (int g = 0; g < N_GROUPS; g++) fprintf(out, "%s\"%s\"", g ? ", " : "", cfg_group_names[g]);
    fputs("],\n \"keys\": [\n", out);
    for (int k = 0; k < cfg_n_keys; k++) {
        fputs("  ", out);
        json_key(out, &cfg_keys[k]);
        fputs(k + 1 < cfg_n_keys ? ",\n" : "\n", out);
    }
    fputs(" ]}\n", out);
}
