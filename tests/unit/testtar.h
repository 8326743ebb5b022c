/* Tar archives built in memory for tests: ustar members (io/tar.h's
 * headers, mtime 1700000000) and the end-of-archive blocks. Aborts when
 * memory runs out or a name does not fit: a test's own mistake. */
#ifndef DPM_TEST_TESTTAR_H
#define DPM_TEST_TESTTAR_H

#include <stddef.h>
#include <stdint.h>

typedef struct test_tar {
  uint8_t *b; /* the archive so far (malloc'd; free it) */
  size_t n, cap;
} test_tar;

/* Appends n raw bytes. */
void test_tar_put(test_tar *t, const void *p, size_t n);
/* Appends a regular member: its header, data and padding. */
void test_tar_member(test_tar *t, const char *name, const void *data, size_t len);
/* Appends the two all-zero blocks that end an archive. */
void test_tar_end(test_tar *t);

#endif
