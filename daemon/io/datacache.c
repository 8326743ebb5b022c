/* The dataset cache: a list of entries under one lock.
 *
 * Invariants (under mu): every linked entry is in `list`; `loading` ones
 * are being read by the thread that missed (bytes not yet counted); the
 * others count their data in c->bytes. refs counts holds and waiters; an
 * entry is freed when it is unlinked and refs is 0. A failed read unlinks
 * its entry before waking the waiters, so no one finds it again. `tick`
 * orders releases: the idle entry with the smallest `used` is the least
 * recently released. Data sets are few, so lookups scan the list. */
#include "io/datacache.h"

#include <errno.h>
#include <pthread.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

typedef struct data_key {
  dev_t dev;
  ino_t ino;
  off_t size;
  struct timespec mtime;
} data_key;

struct dpm_data_entry {
  dpm_data_entry *next;
  data_key key;
  char *path;   /* the name it was read by */
  dpm_idx idx;
  int refs;     /* holds and waiters */
  int loading;  /* being read by the thread that missed */
  int linked;   /* in the list */
  int stale;    /* the file changed since: evict once idle */
  uint64_t used; /* tick of the last release */
};

struct dpm_data_cache {
  pthread_mutex_t mu;
  pthread_cond_t loaded; /* an entry stopped loading */
  dpm_data_entry *list;
  uint64_t max_bytes, bytes, tick;
  uint64_t hits, misses, evictions;
};

static void key_of(const struct stat *st, data_key *k) {
  *k = (data_key){.dev = st->st_dev, .ino = st->st_ino, .size = st->st_size,
                  .mtime = st->st_mtim};
}

static int same_file(const data_key *a, const data_key *b) {
  return a->dev == b->dev && a->ino == b->ino;
}

static int same_key(const data_key *a, const data_key *b) {
  return same_file(a, b) && a->size == b->size && a->mtime.tv_sec == b->mtime.tv_sec &&
         a->mtime.tv_nsec == b->mtime.tv_nsec;
}

static void entry_free(dpm_data_entry *e) {
  dpm_idx_fini(&e->idx);
  free(e->path);
  free(e);
}

static void unlink_entry(dpm_data_cache *c, dpm_data_entry *e) {
  for (dpm_data_entry **p = &c->list; *p; p = &(*p)->next)
    if (*p == e) {
      *p = e->next;
      break;
    }
  e->linked = 0;
}

/* Evicts idle entries: the stale ones, then the least recently released
 * while the total is over the bound. Under mu. */
static void evict(dpm_data_cache *c) {
  for (;;) {
    dpm_data_entry *victim = NULL;
    for (dpm_data_entry *e = c->list; e; e = e->next) {
      if (e->refs || e->loading) continue;
      if (e->stale) {
        victim = e;
        break;
      }
      if (c->bytes > c->max_bytes && (!victim || e->used < victim->used)) victim = e;
    }
    if (!victim) return;
    unlink_entry(c, victim);
    c->bytes -= victim->idx.size;
    c->evictions++;
    entry_free(victim);
  }
}

dpm_status dpm_data_cache_create(uint64_t max_bytes, dpm_data_cache **out, dpm_err *err) {
  dpm_data_cache *c = calloc(1, sizeof *c);
  if (!c) return dpm_errf(err, DPM_NOMEM, "data cache: out of memory");
  pthread_mutex_init(&c->mu, NULL);
  pthread_cond_init(&c->loaded, NULL);
  c->max_bytes = max_bytes;
  *out = c;
  return DPM_OK;
}

void dpm_data_cache_destroy(dpm_data_cache *c) {
  if (!c) return;
  for (dpm_data_entry *e = c->list, *n; e; e = n) {
    n = e->next;
    entry_free(e);
  }
  pthread_cond_destroy(&c->loaded);
  pthread_mutex_destroy(&c->mu);
  free(c);
}

/* The whole file open at fd, its bytes as they are (DPM_DATA_BYTES). */
static dpm_status read_bytes(int fd, const char *path, const data_key *k, dpm_idx *out,
                             dpm_err *err) {
  if (k->size < 0 || (uint64_t)k->size > DPM_DATA_MAX_FILE)
    return dpm_errf(err, DPM_CORRUPT, "%s: larger than %llu bytes", path,
                    (unsigned long long)DPM_DATA_MAX_FILE);
  size_t size = (size_t)k->size;
  uint8_t *data = malloc(size ? size : 1);
  if (!data) return dpm_errf(err, DPM_NOMEM, "%s: cannot hold %zu bytes", path, size);
  for (size_t got = 0; got < size;) {
    ssize_t r = pread(fd, data + got, size - got, (off_t)got);
    if (r < 0 && errno == EINTR) continue;
    if (r <= 0) {
      free(data);
      return r < 0 ? dpm_errf(err, DPM_IO, "%s: read: %s", path, strerror(errno))
                   : dpm_errf(err, DPM_IO, "%s: changed while it was being read", path);
    }
    got += (size_t)r;
  }
  *out = (dpm_idx){.ndim = DPM_DATA_BYTES, .dim = {k->size}, .data = data, .size = size};
  return DPM_OK;
}

static const char *kind_name(int ndim) {
  return ndim == DPM_DATA_BYTES ? "bytes" : ndim == 1 ? "IDX labels" : "IDX images";
}

/* Reads the file open at fd (whose key is k) into e; checks that the file
 * did not change meanwhile. */
static dpm_status read_entry(int fd, const char *path, int ndim, const data_key *k,
                             dpm_data_entry *e, dpm_err *err) {
  if (ndim == DPM_DATA_BYTES ? read_bytes(fd, path, k, &e->idx, err)
                             : dpm_idx_load_fd(fd, path, ndim, &e->idx, err))
    return err->code;
  struct stat st;
  data_key after;
  if (fstat(fd, &st) != 0)
    return dpm_errf(err, DPM_IO, "%s: fstat: %s", path, strerror(errno));
  key_of(&st, &after);
  if (!same_key(k, &after))
    return dpm_errf(err, DPM_IO, "%s: changed while it was being read", path);
  return DPM_OK;
}

/* The entry of key k, held (waiting while it loads); NULL when there is
 * none, or its read failed. Under mu. */
static dpm_data_entry *find(dpm_data_cache *c, const data_key *k) {
  for (dpm_data_entry *e = c->list; e; e = e->next) {
    if (!same_key(&e->key, k)) continue;
    e->refs++;
    while (e->loading) pthread_cond_wait(&c->loaded, &c->mu);
    if (e->linked) return e;
    if (--e->refs == 0) entry_free(e); /* its read failed */
    return NULL;
  }
  return NULL;
}

/* A miss: reads the file into a new entry, linked while it loads so that
 * others asking for it wait (find). Called and returns under mu. */
static dpm_status load(dpm_data_cache *c, int fd, const char *path, int ndim,
                       const data_key *k, dpm_data_entry **out, dpm_err *err) {
  for (dpm_data_entry *o = c->list; o; o = o->next)
    if (same_file(&o->key, k) || !strcmp(o->path, path)) o->stale = 1;
  evict(c); /* the stale entries no one holds */
  dpm_data_entry *e = calloc(1, sizeof *e);
  char *name = strdup(path);
  if (!e || !name) {
    free(e);
    free(name);
    return dpm_errf(err, DPM_NOMEM, "data cache: out of memory");
  }
  *e = (dpm_data_entry){.next = c->list, .key = *k, .path = name, .refs = 1, .loading = 1,
                        .linked = 1};
  c->list = e;
  c->misses++;
  pthread_mutex_unlock(&c->mu);
  dpm_status s = read_entry(fd, path, ndim, k, e, err);
  pthread_mutex_lock(&c->mu);
  e->loading = 0;
  pthread_cond_broadcast(&c->loaded);
  if (s) {
    unlink_entry(c, e);
    if (--e->refs == 0) entry_free(e);
    return s;
  }
  c->bytes += e->idx.size;
  evict(c);
  *out = e;
  return DPM_OK;
}

dpm_status dpm_data_cache_get(dpm_data_cache *c, const dpm_fs *fs, const char *path,
                              int ndim, dpm_data_entry **out, dpm_err *err) {
  *out = NULL;
  if (!path || !*path) return dpm_errf(err, DPM_INVALID, "data cache: no file name");
  int fd;
  if (dpm_file_open_read(fs, path, &fd, err)) return err->code;
  struct stat st;
  if (fstat(fd, &st) != 0) {
    dpm_status s = dpm_errf(err, DPM_IO, "%s: fstat: %s", path, strerror(errno));
    close(fd);
    return s;
  }
  data_key k;
  key_of(&st, &k);
  dpm_status s = DPM_OK;
  dpm_data_entry *e = NULL;
  if (!c) { /* a private copy */
    if (!(e = calloc(1, sizeof *e)))
      s = dpm_errf(err, DPM_NOMEM, "data cache: out of memory");
    else if ((s = read_entry(fd, path, ndim, &k, e, err)))
      entry_free(e), e = NULL;
  } else {
    pthread_mutex_lock(&c->mu);
    if ((e = find(c, &k))) {
      c->hits++;
      if (ndim && e->idx.ndim != ndim) { /* the same file, asked for as another kind */
        s = dpm_errf(err, DPM_CORRUPT, "%s: held as %s, asked for as %s", path,
                     kind_name(e->idx.ndim), kind_name(ndim));
        e->refs--;
        evict(c);
        e = NULL;
      }
    } else {
      s = load(c, fd, path, ndim, &k, &e, err);
    }
    pthread_mutex_unlock(&c->mu);
  }
  close(fd);
  if (e && !c) e->refs = 1;
  *out = e;
  return s;
}

const dpm_idx *dpm_data_entry_idx(const dpm_data_entry *e) { return &e->idx; }

void dpm_data_cache_release(dpm_data_cache *c, dpm_data_entry *e) {
  if (!e) return;
  if (!c) {
    entry_free(e);
    return;
  }
  pthread_mutex_lock(&c->mu);
  e->used = ++c->tick;
  if (--e->refs == 0 && !e->linked)
    entry_free(e);
  else
    evict(c);
  pthread_mutex_unlock(&c->mu);
}

void dpm_data_cache_stats_of(dpm_data_cache *c, dpm_data_cache_stats *out) {
  memset(out, 0, sizeof *out);
  if (!c) return;
  pthread_mutex_lock(&c->mu);
  out->max_bytes = c->max_bytes;
  out->bytes = c->bytes;
  out->hits = c->hits;
  out->misses = c->misses;
  out->evictions = c->evictions;
  for (dpm_data_entry *e = c->list; e; e = e->next) {
    if (e->loading) continue;
    out->entries++;
    if (e->refs) {
      out->held_entries++;
      out->held_bytes += e->idx.size;
    }
  }
  pthread_mutex_unlock(&c->mu);
}
