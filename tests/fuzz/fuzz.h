/* Helpers shared by the fuzz targets (tests/fuzz/fuzz_*.c). Header-only:
 * every target is one .c file that includes this. */
#ifndef DPM_FUZZ_H
#define DPM_FUZZ_H

#include <errno.h>
#include <stddef.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/mman.h>
#include <unistd.h>

#include "dpm/status.h"
#include "common/file.h"

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size);

/* An invariant of the code under test: a failure aborts, which the fuzzer
 * and the replay report as a finding with this line. */
#define FUZZ_CHECK(cond)                                                                 \
  do {                                                                                   \
    if (!(cond)) {                                                                       \
      fprintf(stderr, "%s:%d: fuzz check failed: %s\n", __FILE__, __LINE__, #cond);      \
      abort();                                                                           \
    }                                                                                    \
  } while (0)

/* The bytes an in-memory fs serves. */
typedef struct fuzz_bytes {
  const uint8_t *data;
  size_t size;
} fuzz_bytes;

/* A descriptor of a new anonymous in-memory file (memfd: regular, blocking,
 * nothing on disk) holding the bytes, at offset 0; -1 on failure. */
static inline int fuzz_memfd(const uint8_t *data, size_t size) {
  int fd = memfd_create("fuzz-input", MFD_CLOEXEC);
  if (fd < 0) return -1;
  for (size_t done = 0; done < size;) {
    ssize_t n = write(fd, data + done, size - done);
    if (n < 0 && errno == EINTR) continue;
    if (n <= 0) {
      close(fd);
      return -1;
    }
    done += (size_t)n;
  }
  if (lseek(fd, 0, SEEK_SET) != 0) {
    close(fd);
    return -1;
  }
  return fd;
}

static inline dpm_status fuzz_fs_open_read(const dpm_fs *fs, const char *path, int *fd,
                                           dpm_err *err) {
  const fuzz_bytes *b = fs->ctx;
  if ((*fd = fuzz_memfd(b->data, b->size)) < 0)
    return dpm_errf(err, DPM_IO, "%s: memfd: %s", path, strerror(errno));
  return DPM_OK;
}

static inline dpm_status fuzz_fs_open_dir(const dpm_fs *fs, const char *path, int mkdirs,
                                          int *dirfd, char *base, size_t cap,
                                          dpm_err *err) {
  (void)fs, (void)mkdirs, (void)dirfd, (void)base, (void)cap;
  return dpm_errf(err, DPM_DENIED, "%s: the fuzz fs writes nothing", path);
}

/* A dpm_fs (common/file.h) on which every path opens as a fresh in-memory file
 * holding b's bytes: the readers that take an fs and a path read the input
 * through their real descriptor code, without the file system. b must
 * outlive the fs's use. */
static inline dpm_fs fuzz_fs(const fuzz_bytes *b) {
  return (dpm_fs){
      .open_read = fuzz_fs_open_read, .open_dir = fuzz_fs_open_dir, .ctx = (void *)b};
}

/* Reads every byte of p[0, n) so that the sanitizers see an access beyond
 * what was allocated or a use of freed memory; the result is discarded. */
static inline void fuzz_touch(const void *p, size_t n) {
  const volatile uint8_t *b = p;
  uint8_t x = 0;
  for (size_t i = 0; i < n; i++) x ^= b[i];
  (void)x;
}

#endif
