/* ps_rowcopy: copy of one embedding row whose size is only known at run time.
 *
 * Pull paths copy thousands of rows of the same small size per request (64 bytes for dim 16).
 * A memcpy with a run-time size is a call into libc per row, whose size dispatch costs about
 * as much as moving 64 bytes; the common row sizes get a copy whose size the compiler knows,
 * which it turns into a few vector moves inline. */
#ifndef PS_ROWCOPY_H
#define PS_ROWCOPY_H

#include <stddef.h>
#include <string.h>

static inline void ps_row_copy(void *restrict dst, const void *restrict src, size_t bytes) {
  switch (bytes) {
    case 32: memcpy(dst, src, 32); return;
    case 64: memcpy(dst, src, 64); return;
    case 128: memcpy(dst, src, 128); return;
    case 256: memcpy(dst, src, 256); return;
    case 512: memcpy(dst, src, 512); return;
    default: memcpy(dst, src, bytes); return;
  }
}

#endif
