/* The dataset cache (io/datacache.h): one copy per file however many hold
 * it, a changed or replaced file read again (the old copy dropped once
 * released), the bound (idle entries evicted least recently released
 * first, held ones never), concurrent gets of one file reading it once,
 * failed reads not cached, the private copies of a NULL cache, and readers
 * of one data set sharing its copy. Files are small raw IDX files in a
 * mkdtemp directory. */
#include <fcntl.h>
#include <pthread.h>
#include <stdint.h>
#include <stdlib.h>
#include <sys/stat.h>
#include <unistd.h>

#include "io/datacache.h"
#include "io/reader.h"
#include "test.h"
#include "testfile.h"

static char dir[64];

/* DIR/name holding an IDX label file of n labels, each `value`; its path. */
static const char *labels(const char *name, int n, uint8_t value, char *path, size_t cap) {
  if (!dir[0]) {
    snprintf(dir, sizeof dir, "/tmp/dpm-datacache-XXXXXX");
    if (!mkdtemp(dir)) return NULL;
  }
  snprintf(path, cap, "%s/%s", dir, name);
  uint8_t buf[8 + 256] = {0, 0, 8, 1, (uint8_t)(n >> 24), (uint8_t)(n >> 16),
                          (uint8_t)(n >> 8), (uint8_t)n};
  memset(buf + 8, value, (size_t)n);
  return test_write_file(path, buf, 8 + (size_t)n) ? NULL : path;
}

/* DIR/name holding an IDX image file of n 2x2 images, every pixel `value`. */
static const char *images(const char *name, int n, uint8_t value, char *path, size_t cap) {
  snprintf(path, cap, "%s/%s", dir, name);
  uint8_t buf[16 + 256] = {0, 0, 8, 3, 0, 0, 0, (uint8_t)n, 0, 0, 0, 2, 0, 0, 0, 2};
  memset(buf + 16, value, 4 * (size_t)n);
  return test_write_file(path, buf, 16 + 4 * (size_t)n) ? NULL : path;
}

static void cleanup(void) {
  char cmd[128];
  snprintf(cmd, sizeof cmd, "rm -rf %s", dir);
  if (dir[0] && system(cmd) != 0) fprintf(stderr, "cannot remove %s\n", dir);
  dir[0] = 0;
}

static dpm_data_cache_stats stats(dpm_data_cache *c) {
  dpm_data_cache_stats s;
  dpm_data_cache_stats_of(c, &s);
  return s;
}

/* Sets path's mtime to `sec` seconds (the file changed, as far as its key
 * goes, without waiting for the clock). */
static int set_mtime(const char *path, time_t sec) {
  struct timespec ts[2] = {{sec, 0}, {sec, 0}};
  return utimensat(AT_FDCWD, path, ts, 0);
}

TEST(datacache_shares_one_copy) {
  char p[128];
  CHECK(labels("a", 100, 3, p, sizeof p));
  dpm_data_cache *c;
  dpm_err err = {0};
  CHECK_INT(dpm_data_cache_create(1 << 20, &c, &err), DPM_OK);
  dpm_data_entry *e1, *e2;
  CHECK_INT(dpm_data_cache_get(c, NULL, p, 1, &e1, &err), DPM_OK);
  CHECK_INT(dpm_data_cache_get(c, NULL, p, 1, &e2, &err), DPM_OK);
  CHECK(e1 == e2);
  CHECK(dpm_data_entry_idx(e1)->data == dpm_data_entry_idx(e2)->data);
  CHECK_INT(dpm_data_entry_idx(e1)->dim[0], 100);
  CHECK_INT(dpm_data_entry_idx(e1)->data[99], 3);
  dpm_data_cache_stats s = stats(c);
  CHECK_INT(s.misses, 1);
  CHECK_INT(s.hits, 1);
  CHECK_INT(s.entries, 1);
  CHECK_INT(s.bytes, 100);
  CHECK_INT(s.held_bytes, 100);
  /* the same file asked for as images: refused, and not a second copy */
  dpm_data_entry *bad;
  CHECK_INT(dpm_data_cache_get(c, NULL, p, 3, &bad, &err), DPM_CORRUPT);
  CHECK(bad == NULL);
  CHECK_INT(stats(c).entries, 1);
  dpm_data_cache_release(c, e1);
  CHECK_INT(stats(c).held_entries, 1);
  dpm_data_cache_release(c, e2);
  s = stats(c);
  CHECK_INT(s.held_entries, 0);
  CHECK_INT(s.entries, 1); /* idle and within the bound: kept */
  CHECK_INT(s.bytes, 100);
  CHECK_INT(dpm_data_cache_get(c, NULL, p, 1, &e1, &err), DPM_OK);
  CHECK_INT(stats(c).misses, 1); /* still the first read */
  dpm_data_cache_release(c, e1);
  dpm_data_cache_destroy(c);
  cleanup();
}

TEST(datacache_reads_a_changed_file_again) {
  char p[128], q[128];
  CHECK(labels("a", 50, 1, p, sizeof p));
  CHECK_INT(set_mtime(p, 1000), 0);
  dpm_data_cache *c;
  dpm_err err = {0};
  CHECK_INT(dpm_data_cache_create(1 << 20, &c, &err), DPM_OK);
  dpm_data_entry *old, *now;
  CHECK_INT(dpm_data_cache_get(c, NULL, p, 1, &old, &err), DPM_OK);
  /* rewritten in place, the same size, a new mtime */
  CHECK(labels("a", 50, 2, p, sizeof p));
  CHECK_INT(set_mtime(p, 2000), 0);
  CHECK_INT(dpm_data_cache_get(c, NULL, p, 1, &now, &err), DPM_OK);
  CHECK(now != old);
  CHECK_INT(dpm_data_entry_idx(old)->data[0], 1); /* a holder's copy stays as it was */
  CHECK_INT(dpm_data_entry_idx(now)->data[0], 2);
  CHECK_INT(stats(c).misses, 2);
  CHECK_INT(stats(c).entries, 2);
  dpm_data_cache_release(c, old); /* stale: goes once released, whatever the bound */
  dpm_data_cache_stats s = stats(c);
  CHECK_INT(s.entries, 1);
  CHECK_INT(s.evictions, 1);
  dpm_data_cache_release(c, now);
  /* replaced by another file (a new inode) */
  CHECK(labels("b", 60, 4, q, sizeof q));
  CHECK_INT(rename(q, p), 0);
  CHECK_INT(dpm_data_cache_get(c, NULL, p, 1, &now, &err), DPM_OK);
  CHECK_INT(dpm_data_entry_idx(now)->dim[0], 60);
  CHECK_INT(dpm_data_entry_idx(now)->data[0], 4);
  CHECK_INT(stats(c).misses, 3);
  dpm_data_cache_release(c, now);
  s = stats(c);
  CHECK_INT(s.entries, 1); /* the replaced file's copy was idle and stale: gone */
  CHECK_INT(s.bytes, 60);
  dpm_data_cache_destroy(c);
  cleanup();
}

TEST(datacache_respects_its_bound) {
  char a[128], b[128], d[128];
  CHECK(labels("a", 100, 0, a, sizeof a));
  CHECK(labels("b", 100, 0, b, sizeof b));
  CHECK(labels("d", 100, 0, d, sizeof d));
  dpm_data_cache *c;
  dpm_err err = {0};
  CHECK_INT(dpm_data_cache_create(250, &c, &err), DPM_OK); /* two files fit, not three */
  dpm_data_entry *ea, *eb, *ed;
  CHECK_INT(dpm_data_cache_get(c, NULL, a, 1, &ea, &err), DPM_OK);
  CHECK_INT(dpm_data_cache_get(c, NULL, b, 1, &eb, &err), DPM_OK);
  dpm_data_cache_release(c, ea); /* a, then b: a is the least recently released */
  dpm_data_cache_release(c, eb);
  CHECK_INT(stats(c).bytes, 200);
  CHECK_INT(dpm_data_cache_get(c, NULL, d, 1, &ed, &err), DPM_OK);
  dpm_data_cache_stats s = stats(c);
  CHECK_INT(s.bytes, 200); /* a went */
  CHECK_INT(s.evictions, 1);
  CHECK_INT(dpm_data_cache_get(c, NULL, b, 1, &eb, &err), DPM_OK);
  CHECK_INT(stats(c).misses, 3); /* b stayed */
  /* held entries stay over the bound; each released then goes at once */
  CHECK_INT(dpm_data_cache_get(c, NULL, a, 1, &ea, &err), DPM_OK);
  s = stats(c);
  CHECK_INT(s.bytes, 300);
  CHECK_INT(s.held_bytes, 300);
  dpm_data_cache_release(c, ea);
  CHECK_INT(stats(c).bytes, 200);
  dpm_data_cache_release(c, eb);
  dpm_data_cache_release(c, ed);
  s = stats(c);
  CHECK(s.bytes <= 250);
  CHECK_INT(s.held_entries, 0);
  dpm_data_cache_destroy(c);
  /* bound 0: nothing kept once every holder let go */
  CHECK_INT(dpm_data_cache_create(0, &c, &err), DPM_OK);
  CHECK_INT(dpm_data_cache_get(c, NULL, a, 1, &ea, &err), DPM_OK);
  CHECK_INT(dpm_data_cache_get(c, NULL, a, 1, &eb, &err), DPM_OK);
  CHECK(ea == eb);
  dpm_data_cache_release(c, ea);
  CHECK_INT(stats(c).entries, 1);
  dpm_data_cache_release(c, eb);
  CHECK_INT(stats(c).entries, 0);
  CHECK_INT(stats(c).bytes, 0);
  dpm_data_cache_destroy(c);
  cleanup();
}

TEST(datacache_failed_read_is_not_cached) {
  char p[128];
  CHECK(labels("a", 10, 0, p, sizeof p));
  CHECK(truncate(p, 12) == 0); /* 4 of the 10 labels the header promises */
  dpm_data_cache *c;
  dpm_err err = {0};
  CHECK_INT(dpm_data_cache_create(1 << 20, &c, &err), DPM_OK);
  dpm_data_entry *e;
  CHECK_INT(dpm_data_cache_get(c, NULL, p, 1, &e, &err), DPM_CORRUPT);
  CHECK(strstr(err.msg, "truncated") != NULL);
  CHECK_INT(stats(c).entries, 0);
  CHECK_INT(dpm_data_cache_get(c, NULL, "/nonexistent/labels", 1, &e, &err), DPM_IO);
  CHECK(strstr(err.msg, "/nonexistent/labels") != NULL);
  CHECK(labels("a", 10, 0, p, sizeof p)); /* repaired: read */
  CHECK_INT(dpm_data_cache_get(c, NULL, p, 1, &e, &err), DPM_OK);
  CHECK_INT(stats(c).misses, 2);
  dpm_data_cache_release(c, e);
  dpm_data_cache_destroy(c);
  /* no cache: each get a private copy, freed at release */
  dpm_data_entry *x, *y;
  CHECK_INT(dpm_data_cache_get(NULL, NULL, p, 1, &x, &err), DPM_OK);
  CHECK_INT(dpm_data_cache_get(NULL, NULL, p, 1, &y, &err), DPM_OK);
  CHECK(x != y && dpm_data_entry_idx(x)->data != dpm_data_entry_idx(y)->data);
  dpm_data_cache_release(NULL, x);
  dpm_data_cache_release(NULL, y);
  cleanup();
}

typedef struct getter {
  dpm_data_cache *c;
  const char *path;
  dpm_data_entry *e;
  dpm_status s;
} getter;

static void *get_one(void *arg) {
  getter *g = arg;
  dpm_err err = {0};
  g->s = dpm_data_cache_get(g->c, NULL, g->path, 3, &g->e, &err);
  return NULL;
}

TEST(datacache_concurrent_gets_read_once) {
  char p[128];
  CHECK(labels("unused", 1, 0, p, sizeof p)); /* makes the directory */
  CHECK(images("img", 50, 7, p, sizeof p));
  dpm_data_cache *c;
  dpm_err err = {0};
  CHECK_INT(dpm_data_cache_create(1 << 20, &c, &err), DPM_OK);
  enum { N = 8 };
  getter g[N];
  pthread_t th[N];
  for (int i = 0; i < N; i++) {
    g[i] = (getter){.c = c, .path = p};
    CHECK_INT(pthread_create(&th[i], NULL, get_one, &g[i]), 0);
  }
  for (int i = 0; i < N; i++) pthread_join(th[i], NULL);
  for (int i = 0; i < N; i++) {
    CHECK_INT(g[i].s, DPM_OK);
    CHECK(g[i].e == g[0].e);
  }
  dpm_data_cache_stats s = stats(c);
  CHECK_INT(s.misses, 1);
  CHECK_INT(s.hits, N - 1);
  CHECK_INT(s.bytes, 200);
  for (int i = 0; i < N; i++) dpm_data_cache_release(c, g[i].e);
  dpm_data_cache_destroy(c);
  cleanup();
}

TEST(datacache_readers_share_a_data_set) {
  char ip[128], lp[128];
  CHECK(labels("l", 40, 9, lp, sizeof lp));
  CHECK(images("i", 40, 5, ip, sizeof ip));
  dpm_data_cache *c;
  dpm_err err = {0};
  CHECK_INT(dpm_data_cache_create(1 << 20, &c, &err), DPM_OK);
  dpm_reader_config cfg = {.kind = DPM_READER_IDX, .images = ip, .labels = lp,
                           .cache = c, .scale = 1, .shuffle = 1, .seed = 1,
                           .batch = 4, .num_shards = 1, .prefetch = 2, .repeat = 1};
  dpm_reader *r1, *r2;
  CHECK_INT(dpm_reader_create(&cfg, &r1, &err), DPM_OK);
  CHECK_INT(dpm_reader_create(&cfg, &r2, &err), DPM_OK);
  dpm_data_cache_stats s = stats(c);
  CHECK_INT(s.misses, 2); /* images and labels, once */
  CHECK_INT(s.hits, 2);
  CHECK_INT(s.held_bytes, 40 * 4 + 40);
  const dpm_batch *b;
  CHECK_INT(dpm_reader_next(r2, &b, &err), DPM_OK);
  CHECK_INT(b->label[0], 9);
  CHECK_NEAR(b->data[0], 5.0, 0);
  /* a label file whose labels exceed num_classes is refused by the reader
     that asks, and stays cached for the others */
  cfg.num_classes = 5;
  dpm_reader *r3;
  CHECK_INT(dpm_reader_create(&cfg, &r3, &err), DPM_CORRUPT);
  CHECK(strstr(err.msg, "label at index 0 is out of range [0, 5)") != NULL);
  dpm_reader_destroy(r1);
  dpm_reader_destroy(r2);
  s = stats(c);
  CHECK_INT(s.held_entries, 0);
  CHECK_INT(s.entries, 2);
  dpm_data_cache_destroy(c);
  cleanup();
}
