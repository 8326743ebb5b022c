/* Whole-file helpers for tests. */
#ifndef DPM_TEST_TESTFILE_H
#define DPM_TEST_TESTFILE_H

#include <stddef.h>
#include <stdint.h>

/* The file's bytes (malloc'd, one spare byte) and their count in *len;
 * NULL if it cannot be read. */
uint8_t *test_read_file(const char *path, size_t *len);
/* Writes len bytes (replacing the file); 0 or -1. */
int test_write_file(const char *path, const void *buf, size_t len);

#endif
