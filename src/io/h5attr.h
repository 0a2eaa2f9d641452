/* h5attr.h — the small HDF5 attribute helpers every file format here needs: string types,
 * scalar attributes written and read back (strings fixed or variable length, ASCII or UTF-8 as
 * h5py rewrites them; numbers converted to the caller's type), with bounded sizes.
 * They return < 0 on failure and never print or abort: the caller turns that into its message.
 * Uses: HDF5, core/alloc. Used by: io/checkpoint. */
#ifndef LLMT_H5ATTR_H
#define LLMT_H5ATTR_H
#include <hdf5.h>
#include <stddef.h>

/* A fixed-length, NUL-terminated string type of `len` characters (at least one byte). */
hid_t h5_str_type(size_t len, H5T_cset_t cset);
/* A scalar attribute `name` on loc, written from value (of mem_type) as file_type. */
herr_t h5_write_attr(hid_t loc, const char *name, hid_t file_type, hid_t mem_type, const void *value);
herr_t h5_write_str_attr(hid_t loc, const char *name, const char *value); /* ASCII */
/* A string attribute into *out (xmalloc'ed, the caller xfrees it). 0; 1 when absent (*out NULL);
 * -1 when it exists but cannot be read (damaged, not a string, longer than max bytes). */
int h5_read_text_attr(hid_t loc, const char *name, size_t max, char **out);
/* The same into buf (truncated to len - 1 characters). */
int h5_read_str_attr(hid_t loc, const char *name, size_t max, char *buf, size_t len);
/* A scalar number converted to mem_type. 0; 1 when absent; -1 when it exists but cannot be read
 * or is not a single number. */
int h5_read_num_attr(hid_t loc, const char *name, hid_t mem_type, void *value);
#endif
