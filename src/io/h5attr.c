/* h5attr.c — HDF5 attribute helpers (see h5attr.h). */
#include "io/h5attr.h"
#include <stdio.h>
#include <string.h>
#include "core/alloc.h"

hid_t h5_str_type(size_t len, H5T_cset_t cset) {
    hid_t t = H5Tcopy(H5T_C_S1);
    if (t < 0) return t;
    if (H5Tset_size(t, len + 1) < 0 || H5Tset_strpad(t, H5T_STR_NULLTERM) < 0 ||
        H5Tset_cset(t, cset) < 0) {
        H5Tclose(t);
        return -1;
    }
    return t;
}

herr_t h5_write_attr(hid_t loc, const char *name, hid_t file_type, hid_t mem_type, const void *value) {
    hid_t space = H5Screate(H5S_SCALAR);
    if (space < 0) return -1;
    hid_t attr = H5Acreate2(loc, name, file_type, space, H5P_DEFAULT, H5P_DEFAULT);
    herr_t rc = attr < 0 ? -1 : H5Awrite(attr, mem_type, value);
    if (attr >= 0 && H5Aclose(attr) < 0) rc = -1;
    H5Sclose(space);
    return rc;
}

herr_t h5_write_str_attr(hid_t loc, const char *name, const char *value) {
    hid_t type = h5_str_type(strlen(value), H5T_CSET_ASCII);
    if (type < 0) return -1;
    herr_t rc = h5_write_attr(loc, name, type, type, value);
    H5Tclose(type);
    return rc;
}

/* A copy that xfree releases (HDF5's variable-length strings are freed with H5free_memory). */
static char *tracked_copy(const char *s) {
    size_t n = strlen(s) + 1;
    char *d = xmalloc(n);
    memcpy(d, s, n);
    return d;
}

int h5_read_text_attr(hid_t loc, const char *name, size_t max, char **out) {
    *out = NULL;
    htri_t exists = H5Aexists(loc, name);
    if (exists == 0) return 1;
    if (exists < 0) return -1;
    hid_t attr = H5Aopen(loc, name, H5P_DEFAULT);
    hid_t ftype = attr < 0 ? -1 : H5Aget_type(attr);
    int rc = -1;
    if (ftype >= 0 && H5Tget_class(ftype) == H5T_STRING) {
        /* the memory type must carry the file's character set, or HDF5 refuses to convert */
        H5T_cset_t cset = H5Tget_cset(ftype);
        if (H5Tis_variable_str(ftype) > 0) {
            char *s = NULL;
            hid_t mtype = H5Tcopy(H5T_C_S1);
            if (mtype >= 0 && H5Tset_size(mtype, H5T_VARIABLE) >= 0 && H5Tset_cset(mtype, cset) >= 0 &&
                H5Aread(attr, mtype, &s) >= 0 && (!s || strlen(s) <= max)) {
                *out = tracked_copy(s ? s : "");
                rc = 0;
            }
            if (s) H5free_memory(s);
            if (mtype >= 0) H5Tclose(mtype);
        } else {
            size_t n = H5Tget_size(ftype);
            hid_t mtype = n > 0 && n <= max ? h5_str_type(n, cset) : -1;
            if (mtype >= 0) {
                char *s = xcalloc(n + 2, 1);
                if (H5Aread(attr, mtype, s) >= 0) {
                    *out = s;
                    rc = 0;
                } else {
                    xfree(s);
                }
                H5Tclose(mtype);
            }
        }
    }
    if (ftype >= 0) H5Tclose(ftype);
    if (attr >= 0) H5Aclose(attr);
    return rc;
}

int h5_read_str_attr(hid_t loc, const char *name, size_t max, char *buf, size_t len) {
    char *s;
    int rc = h5_read_text_attr(loc, name, max, &s);
    if (rc == 0) snprintf(buf, len, "%s", s);
    xfree(s);
    return rc;
}

int h5_read_num_attr(hid_t loc, const char *name, hid_t mem_type, void *value) {
    htri_t exists = H5Aexists(loc, name);
    if (exists == 0) return 1;
    if (exists < 0) return -1;
    hid_t attr = H5Aopen(loc, name, H5P_DEFAULT);
    hid_t space = attr < 0 ? -1 : H5Aget_space(attr);
    hid_t ftype = attr < 0 ? -1 : H5Aget_type(attr);
    int rc = -1;
    if (space >= 0 && ftype >= 0 && H5Sget_simple_extent_npoints(space) == 1) {
        H5T_class_t c = H5Tget_class(ftype);
        if ((c == H5T_INTEGER || c == H5T_FLOAT) && H5Aread(attr, mem_type, value) >= 0) rc = 0;
    }
    if (ftype >= 0) H5Tclose(ftype);
    if (space >= 0) H5Sclose(space);
    if (attr >= 0) H5Aclose(attr);
    return rc;
}
