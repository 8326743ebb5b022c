/* Writing tar members as the tar source (io/source.h) reads them: the
 * packing tool's shards and the tests' files.
 *
 * A member is a 512-byte ustar header, the payload, and zeros up to the
 * next multiple of 512; an archive ends with two all-zero blocks
 * (DPM_TAR_END bytes). Threads: pure; any thread. */
#ifndef DPM_IO_TAR_H
#define DPM_IO_TAR_H

#include <stddef.h>
#include <stdint.h>

#define DPM_TAR_BLOCK 512
#define DPM_TAR_END (2 * DPM_TAR_BLOCK)

/* A regular member's ustar header for name (at most 100 bytes, or 255 when
 * it splits at a '/' into a prefix of <= 155 and a name of <= 100) holding
 * size bytes (< 8 GiB: 11 octal digits), mode 0644, mtime mtime, into h.
 * 0, or -1 when the name or size does not fit. */
int dpm_tar_header(uint8_t h[DPM_TAR_BLOCK], const char *name, uint64_t size,
                   uint64_t mtime);
/* Bytes of padding after a payload of size bytes. */
static inline size_t dpm_tar_pad(uint64_t size) {
  return (size_t)((DPM_TAR_BLOCK - size % DPM_TAR_BLOCK) % DPM_TAR_BLOCK);
}

#endif
