/* Whole-file helpers for tests (testfile.h). */
#include "testfile.h"

#include <stdio.h>
#include <stdlib.h>

uint8_t *test_read_file(const char *path, size_t *len) {
  FILE *f = fopen(path, "rb");
  if (!f) return NULL;
  fseek(f, 0, SEEK_END);
  long n = ftell(f);
  fseek(f, 0, SEEK_SET);
  uint8_t *b = n >= 0 ? malloc((size_t)n + 1) : NULL;
  if (b && fread(b, 1, (size_t)n, f) != (size_t)n) {
    free(b);
    b = NULL;
  }
  fclose(f);
  *len = n > 0 ? (size_t)n : 0;
  return b;
}

int test_write_file(const char *path, const void *buf, size_t len) {
  FILE *f = fopen(path, "wb");
  if (!f) return -1;
  int ok = len == 0 || fwrite(buf, 1, len, f) == len;
  return fclose(f) == 0 && ok ? 0 : -1;
}
