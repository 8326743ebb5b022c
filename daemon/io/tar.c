/* WebDataset tar shards: the index pass (io/source.h, kind tar).
 *
 * A shard is walked header by header from offset 0: 512-byte ustar headers
 * (the checksum checked, unsigned or signed as old tars wrote it; sizes in
 * octal or GNU base-256), GNU long names ('L') and pax extended headers
 * ('x': path and size) applying to the next member, global pax headers
 * ('g'), directories, links and other types skipped. Regular members are
 * grouped into samples by key (io/source.h). Payloads are never read except
 * a .cls label's and a long name's: the walk reads through a window,
 * refilled by pread where the next header lies: WINDOW bytes when that is
 * at most WINDOW past the window's end, so small members cost no extra
 * system call; CHUNK bytes after a longer skip, so a member larger than a
 * window is not read.
 *
 * The walk stops at the first all-zero header (the end-of-archive blocks).
 * A shard that ends before it, a header that ends past the file, a bad
 * checksum, a malformed size field or a member whose payload runs past the
 * end of the file is DPM_CORRUPT naming the shard and the offset. */
#include <errno.h>
#include <fcntl.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <strings.h>
#include <sys/stat.h>
#include <unistd.h>

#include "common/escape.h"
#include "common/file.h"
#include "io/source_index.h"
#include "io/tar.h"

#define BLOCK 512
#define WINDOW (64 * 1024)
#define CHUNK 4096
#define MAX_NAME 4096       /* a member name (GNU long name, pax path) */
#define MAX_PAX (64 * 1024) /* a pax extended header's payload */
#define MAX_CLS 32          /* a .cls member's bytes */

typedef struct tar_walk {
  dpm_source *s;
  const char *path; /* the shard, for messages */
  int fd;
  uint64_t size; /* of the shard */
  uint8_t *win;  /* WINDOW bytes of the shard from win_off */
  uint64_t win_off;
  size_t win_len;
  /* the sample being grouped */
  char key[MAX_NAME + 1];
  size_t key_len;
  int in_group;
  int has_image, has_cls;
  src_item item;
  uint8_t cls_bad;
} tar_walk;

static dpm_status corrupt(const tar_walk *w, uint64_t off, const char *what,
                          dpm_err *err) {
  char b[256];
  return dpm_errf(err, DPM_CORRUPT, "%s: offset %llu: %s",
                  dpm_escape(w->path, b, sizeof b), (unsigned long long)off, what);
}

/* Points *p at n (<= WINDOW) bytes of the shard at off, which lie inside it. */
static dpm_status see(tar_walk *w, uint64_t off, size_t n, const uint8_t **p,
                      dpm_err *err) {
  if (off < w->win_off || off + n > w->win_off + w->win_len) {
    /* a whole window when the walk goes on at most a window past this
     * one's end (small members); after a longer skip over a payload, a
     * chunk: enough for a header and a small member behind it */
    uint64_t end = w->win_off + w->win_len;
    size_t want = off < w->win_off || (off > end && off - end > WINDOW) ? CHUNK : WINDOW;
    if (want < n) want = n;
    if (w->size - off < want) want = (size_t)(w->size - off);
    size_t got = 0;
    while (got < want) {
      ssize_t r = pread(w->fd, w->win + got, want - got, (off_t)(off + got));
      if (r < 0 && errno == EINTR) continue;
      if (r < 0) {
        char b[256];
        return dpm_errf(err, DPM_IO, "%s: %s", dpm_escape(w->path, b, sizeof b),
                        strerror(errno));
      }
      if (r == 0) break;
      got += (size_t)r;
    }
    w->win_off = off;
    w->win_len = got;
    if (got < n) {
      char b[256];
      return dpm_errf(err, DPM_IO, "%s: changed while it was being read",
                      dpm_escape(w->path, b, sizeof b));
    }
  }
  *p = w->win + (off - w->win_off);
  return DPM_OK;
}

/* A numeric header field: octal digits (leading spaces, ending at a space or
 * NUL), or GNU base-256 (first byte 0x80, the rest big-endian). -1 when
 * malformed, negative or above 2^62. */
static int64_t number(const uint8_t *f, size_t n) {
  uint64_t v = 0;
  if (f[0] & 0x80) {
    if (f[0] != 0x80) return -1; /* negative, or more than 8*(n-1) bits */
    for (size_t i = 1; i < n; i++) {
      if (v >> 54) return -1;
      v = v << 8 | f[i];
    }
    return v >> 62 ? -1 : (int64_t)v;
  }
  size_t i = 0;
  while (i < n && f[i] == ' ') i++;
  size_t digits = 0;
  for (; i < n && f[i] >= '0' && f[i] <= '7'; i++, digits++) {
    if (v >> 59) return -1;
    v = v << 3 | (uint64_t)(f[i] - '0');
  }
  if (!digits) return -1;
  for (; i < n; i++)
    if (f[i] != ' ' && f[i] != 0) return -1;
  return (int64_t)v;
}

static int checksum_ok(const uint8_t *h) {
  int64_t stored = number(h + 148, 8);
  if (stored < 0) return 0;
  int64_t u = 0, sg = 0;
  for (int i = 0; i < BLOCK; i++) {
    uint8_t c = i >= 148 && i < 156 ? ' ' : h[i];
    u += c;
    sg += (signed char)c;
  }
  return stored == u || stored == sg;
}

static int all_zero(const uint8_t *h) {
  for (int i = 0; i < BLOCK; i++)
    if (h[i]) return 0;
  return 1;
}

/* A .cls payload: optional white space, 1..10 decimal digits (<= INT32_MAX),
 * optional white space. -1 when it is not that. */
static int64_t cls_label(const uint8_t *p, size_t n) {
  size_t i = 0;
  while (i < n && (p[i] == ' ' || p[i] == '\t' || p[i] == '\n' || p[i] == '\r')) i++;
  int64_t v = 0;
  size_t digits = 0;
  for (; i < n && p[i] >= '0' && p[i] <= '9'; i++)
    if (++digits > 10 || (v = v * 10 + (p[i] - '0')) > INT32_MAX) return -1;
  while (i < n && (p[i] == ' ' || p[i] == '\t' || p[i] == '\n' || p[i] == '\r')) i++;
  return digits && i == n ? v : -1;
}

static dpm_status flush(tar_walk *w, dpm_err *err) {
  if (!w->in_group) return DPM_OK;
  w->in_group = 0;
  src_item it = w->item;
  if (!w->has_image)
    it.bad = DPM_BAD_NO_IMAGE, it.off = it.len = 0;
  else if (!w->has_cls)
    it.bad = DPM_BAD_NO_LABEL;
  else if (w->cls_bad)
    it.bad = w->cls_bad;
  return dpm_src_add_item(w->s, w->key, w->key_len, it, err);
}

/* One regular member, name (NUL-terminated), payload [data, data + len). */
static dpm_status member(tar_walk *w, const char *name, uint64_t data, uint64_t len,
                         dpm_err *err) {
  const char *slash = strrchr(name, '/');
  const char *last = slash ? slash + 1 : name;
  const char *dot = strchr(last, '.');
  if (!dot || dot == last) return DPM_OK; /* no key.ext form: not part of a sample */
  size_t key_len = (size_t)(dot - name);
  const char *ext = dot + 1;
  if (!w->in_group || key_len != w->key_len || memcmp(name, w->key, key_len)) {
    dpm_status st = flush(w, err);
    if (st) return st;
    memcpy(w->key, name, key_len);
    w->key_len = key_len;
    w->in_group = 1;
    w->has_image = w->has_cls = 0;
    w->cls_bad = 0;
    w->item = (src_item){.label = -1};
  }
  int jpeg = !strcasecmp(ext, "jpg") || !strcasecmp(ext, "jpeg");
  if ((jpeg || !strcasecmp(ext, "png")) && !w->has_image) {
    w->has_image = 1;
    w->item.enc = jpeg ? DPM_SAMPLE_JPEG : DPM_SAMPLE_PNG;
    w->item.off = data;
    w->item.len = len;
  } else if (!strcasecmp(ext, "cls") && !w->has_cls) {
    w->has_cls = 1;
    int64_t label = -1;
    if (len <= MAX_CLS) {
      const uint8_t *p;
      dpm_status st = see(w, data, (size_t)len, &p, err);
      if (st) return st;
      label = cls_label(p, (size_t)len);
    }
    if (label < 0)
      w->cls_bad = DPM_BAD_LABEL;
    else
      w->item.label = (int32_t)label;
  }
  return DPM_OK;
}

/* pax records "LEN key=value\n": path and size into *path (cap MAX_NAME+1)
 * and *size. */
static dpm_status pax(tar_walk *w, uint64_t at, const uint8_t *p, size_t n, char *path,
                      int64_t *size, dpm_err *err) {
  size_t i = 0;
  while (i < n) {
    size_t len = 0, j = i;
    while (j < n && p[j] >= '0' && p[j] <= '9' && len < n)
      len = len * 10 + (p[j++] - '0');
    if (j >= n || p[j] != ' ' || len <= j - i + 1 || len > n - i ||
        p[i + len - 1] != '\n')
      return corrupt(w, at, "malformed pax extended header", err);
    const uint8_t *kv = p + j + 1, *end = p + i + len - 1;
    const uint8_t *eq = memchr(kv, '=', (size_t)(end - kv));
    if (!eq) return corrupt(w, at, "malformed pax extended header", err);
    size_t klen = (size_t)(eq - kv), vlen = (size_t)(end - eq - 1);
    if (klen == 4 && !memcmp(kv, "path", 4)) {
      if (vlen > MAX_NAME || memchr(eq + 1, 0, vlen))
        return corrupt(w, at, "pax path too long or holds NUL", err);
      memcpy(path, eq + 1, vlen);
      path[vlen] = 0;
    } else if (klen == 4 && !memcmp(kv, "size", 4)) {
      int64_t v = 0;
      if (!vlen || vlen > 18) return corrupt(w, at, "bad pax size", err);
      for (size_t k = 0; k < vlen; k++) {
        uint8_t c = eq[1 + k];
        if (c < '0' || c > '9') return corrupt(w, at, "bad pax size", err);
        v = v * 10 + (c - '0');
      }
      *size = v;
    }
    i += len;
  }
  return DPM_OK;
}

static dpm_status walk(tar_walk *w, dpm_err *err) {
  char *lname = malloc(2 * (MAX_NAME + 1));
  if (!lname) return dpm_errf(err, DPM_NOMEM, "out of memory");
  char *ppath = lname + MAX_NAME + 1;
  int have_long = 0;
  int64_t pax_size = -1;
  ppath[0] = 0;
  dpm_status st = DPM_OK;
  uint64_t off = 0;
  for (;;) {
    if (off == w->size) {
      st = corrupt(w, off, "ends without the end-of-archive blocks (truncated?)", err);
      break;
    }
    if (w->size - off < BLOCK) {
      st = corrupt(w, off, "a truncated header", err);
      break;
    }
    const uint8_t *h;
    if ((st = see(w, off, BLOCK, &h, err))) break;
    if (all_zero(h)) break; /* the end of the archive */
    if (!checksum_ok(h)) {
      st = corrupt(w, off, "bad header checksum (not a tar file?)", err);
      break;
    }
    int64_t size = number(h + 124, 12);
    if (size < 0) {
      st = corrupt(w, off, "bad size field", err);
      break;
    }
    char type = (char)h[156];
    if (pax_size >= 0 && type != 'x' && type != 'g' && type != 'L') size = pax_size;
    uint64_t data = off + BLOCK;
    if ((uint64_t)size > w->size - data) {
      st = corrupt(w, off, "a member runs past the end of the shard (truncated?)", err);
      break;
    }
    uint64_t padded = ((uint64_t)size + BLOCK - 1) / BLOCK * BLOCK;
    if (padded > w->size - data) {
      st = corrupt(w, off, "a member's padding runs past the end of the shard", err);
      break;
    }
    uint64_t next = data + padded;
    if (type == 'L') {
      const uint8_t *p;
      if (size > MAX_NAME) {
        st = corrupt(w, off, "a GNU long name longer than 4096 bytes", err);
        break;
      }
      if ((st = see(w, data, (size_t)size, &p, err))) break;
      memcpy(lname, p, (size_t)size);
      lname[size] = 0; /* a NUL inside ends it, as tar reads it */
      have_long = 1;
    } else if (type == 'x') {
      const uint8_t *p;
      if (size > MAX_PAX) {
        st = corrupt(w, off, "a pax header longer than 64 KiB", err);
        break;
      }
      if ((st = see(w, data, (size_t)size, &p, err)) ||
          (st = pax(w, off, p, (size_t)size, ppath, &pax_size, err)))
        break;
    } else if (type == 'g') {
      /* global pax records: nothing a sample needs */
    } else {
      if (type == '0' || type == 0 || type == '7') {
        char name[MAX_NAME + 257];
        if (ppath[0])
          snprintf(name, sizeof name, "%s", ppath);
        else if (have_long)
          snprintf(name, sizeof name, "%s", lname);
        else if (!memcmp(h + 257, "ustar", 5) && h[345])
          snprintf(name, sizeof name, "%.155s/%.100s", (const char *)h + 345,
                   (const char *)h);
        else
          snprintf(name, sizeof name, "%.100s", (const char *)h);
        if ((st = member(w, name, data, (uint64_t)size, err))) break;
      }
      have_long = 0;
      ppath[0] = 0;
      pax_size = -1;
    }
    off = next;
  }
  free(lname);
  return st ? st : flush(w, err);
}

dpm_status dpm_tar_index(dpm_source *s, const dpm_source_config *cfg, dpm_err *err) {
  tar_walk *w = malloc(sizeof *w);
  uint8_t *win = malloc(WINDOW);
  dpm_status st = DPM_OK;
  if (!w || !win) {
    free(w);
    free(win);
    return dpm_errf(err, DPM_NOMEM, "out of memory");
  }
  for (int i = 0; i < cfg->n_paths && !st; i++) {
    int fd;
    struct stat sb;
    if ((st = dpm_file_open_read(s->fs, cfg->paths[i], &fd, err))) break;
    if (fstat(fd, &sb)) {
      char b[256];
      st = dpm_errf(err, DPM_IO, "%s: %s", dpm_escape(cfg->paths[i], b, sizeof b),
                    strerror(errno));
      close(fd);
      break;
    }
    if ((st = dpm_src_add_shard(s, cfg->paths[i], fd, &sb, -1, err))) break;
    *w = (tar_walk){.s = s,
                    .path = cfg->paths[i],
                    .fd = fd,
                    .size = (uint64_t)sb.st_size,
                    .win = win};
    st = walk(w, err);
  }
  free(w);
  free(win);
  return st;
}

/* ---- writing (io/tar.h) ------------------------------------------------------- */

int dpm_tar_header(uint8_t h[DPM_TAR_BLOCK], const char *name, uint64_t size,
                   uint64_t mtime) {
  memset(h, 0, DPM_TAR_BLOCK);
  size_t n = strlen(name);
  const char *base = name;
  if (n > 100) { /* split at a '/' into prefix (<= 155) and name (<= 100) */
    const char *cut = NULL;
    for (const char *p = name; *p; p++)
      if (*p == '/' && p - name <= 155 && n - (size_t)(p - name) - 1 <= 100 && p > name)
        cut = p;
    if (!cut || !cut[1]) return -1;
    memcpy(h + 345, name, (size_t)(cut - name));
    base = cut + 1;
  }
  if (!*base || size >= (1ull << 33)) return -1;
  memcpy(h, base, strlen(base));
  snprintf((char *)h + 100, 8, "%07o", 0644);
  snprintf((char *)h + 108, 8, "%07o", 0);
  snprintf((char *)h + 116, 8, "%07o", 0);
  snprintf((char *)h + 124, 12, "%011llo", (unsigned long long)size);
  snprintf((char *)h + 136, 12, "%011llo", (unsigned long long)(mtime & 077777777777ull));
  h[156] = '0';
  memcpy(h + 257, "ustar", 6); /* POSIX magic "ustar\0", version "00" */
  memcpy(h + 263, "00", 2);
  memset(h + 148, ' ', 8);
  unsigned sum = 0;
  for (int i = 0; i < DPM_TAR_BLOCK; i++) sum += h[i];
  snprintf((char *)h + 148, 8, "%06o", sum); /* six digits, NUL, then the space */
  h[155] = ' ';
  return 0;
}
