/* dpm-pack: pack an image data set into WebDataset tar shards or an LMDB of
 * Caffe Datum records, the containers dpm's tar and lmdb readers take
 * (io/source.h).
 *
 *   dpm-pack (--images IDX --labels IDX | --folder DIR) --out PREFIX
 *            [--format tar|lmdb] [--encode png|jpeg] [--quality Q]
 *            [--resize SIDE] [--per-shard N | --shard-size BYTES]
 *            [--no-progress]
 *
 * Input: an IDX pair (gzip or raw, common/idx.h), whose grey pixels are
 * encoded as PNG (lossless, the default) or JPEG (--quality, default 90),
 * after an optional bilinear resize to SIDE x SIDE (pack/encode.h); or an
 * image folder (root/CLASS/FILE, io/source.h's folder kind), whose files
 * are stored as they are (no re-encoding; --encode, --quality and --resize
 * do not apply), after checking that each begins as a JPEG or PNG does.
 * Samples are numbered in input order: key "%08d" (the sample's index among
 * those written), label = the IDX label or the class's index.
 *
 * Output: tar: PREFIX-000000.tar, PREFIX-000001.tar, ...; each member pair
 * KEY.png (or .jpg) and KEY.cls (the label in decimal); a shard closes after
 * --per-shard samples, or before a sample that would take it past
 * --shard-size bytes (a shard holds at least one sample); default: one
 * shard per 1 GiB. lmdb: the directory PREFIX holding data.mdb (no lock
 * file; open it read-only with MDB_NOLOCK), one encoded Datum per sample
 * (channels, height, width set for IDX input). Every file is written
 * through dpm_file_write: a temporary beside it, fsynced and renamed, so a
 * failed run leaves no half shard under its final name.
 *
 * Progress goes to stderr, a line redrawn on a terminal (none otherwise or
 * with --no-progress). The summary goes to stdout as "key: value" lines:
 * samples, classes, shards, image_bytes, output_bytes, rejected (then one
 * line per rejected file, at most 20, with its reason), seconds,
 * images_per_s. Exit codes: 0 ok, 1 failed, 2 usage. */
#include <errno.h>
#include <limits.h>
#include <lmdb.h>
#include <stddef.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "common/clock.h"
#include "common/escape.h"
#include "common/file.h"
#include "common/idx.h"
#include "common/flags.h"
#include "common/manpage.h"
#include "dpm/protocol.h"
#include "io/datum.h"
#include "io/source.h"
#include "io/tar.h"
#include "pack/encode.h"

typedef struct {
  const char *images, *labels, *folder, *out, *format, *encode;
  long quality, resize, per_shard, shard_size;
  int no_progress;
} options;

/* Command-line options: one table (common/flags.h). */
static const dpm_flag flags[] = {
    {"--images", offsetof(options, images), 's', "IDX image file (gzip or raw)"},
    {"--labels", offsetof(options, labels), 's', "IDX label file (with --images)"},
    {"--folder", offsetof(options, folder), 's',
     "image folder DIR/CLASS/FILE.{jpg,jpeg,png} (instead of --images)"},
    {"--out", offsetof(options, out), 's',
     "tar: shards PREFIX-000000.tar ...; lmdb: the database directory"},
    {"--format", offsetof(options, format), 's', "tar (default) | lmdb"},
    {"--encode", offsetof(options, encode), 's',
     "IDX input: png (default, exact) | jpeg"},
    {"--quality", offsetof(options, quality), 'l', "JPEG quality 1..100 (default 90)"},
    {"--resize", offsetof(options, resize), 'l',
     "IDX input: resize to SIDE x SIDE first, bilinear (half-pixel centres)"},
    {"--per-shard", offsetof(options, per_shard), 'l', "tar: samples per shard"},
    {"--shard-size", offsetof(options, shard_size), 'l',
     "tar: most bytes per shard (default 1073741824)"},
    {"--no-progress", offsetof(options, no_progress), 'b', "no progress line"},
};
#define N_FLAGS (sizeof flags / sizeof *flags)
#define MAX_REJECTED_SHOWN 20
#define REDRAW_S 0.2

static int usage(const char *msg) {
  FILE *f = msg ? stderr : stdout;
  if (msg) fprintf(stderr, "dpm-pack: %s\n", msg);
  fprintf(f, "usage: dpm-pack (--images IDX --labels IDX | --folder DIR) --out PREFIX "
             "[options]\n");
  dpm_flags_usage(f, flags, N_FLAGS);
  return msg ? 2 : 0;
}

/* dpm-pack.1 in roff (common/manpage.h), its options from the table. */
static int man(void) {
  FILE *f = stdout;
  dpm_man_begin(f, "dpm-pack", "1", DPM_VERSION,
                "pack images into WebDataset tar shards or a Caffe LMDB");
  dpm_man_section(f, "SYNOPSIS");
  dpm_man_text(f, "dpm-pack (--images IDX --labels IDX | --folder DIR) --out PREFIX "
                  "[options]");
  dpm_man_section(f, "DESCRIPTION");
  dpm_man_para(f, "Turns an IDX image set (encoded as PNG, exact, or JPEG, optionally "
                  "resized bilinearly) or an image folder with one sub-folder per class "
                  "(files stored as they are) into WebDataset tar shards "
                  "(PREFIX-000000.tar ..., members KEY.png or KEY.jpg and KEY.cls) or an "
                  "LMDB of encoded Caffe Datum records (PREFIX/data.mdb). dpm's tar and "
                  "lmdb readers read both. A summary (samples, classes, shards, bytes, "
                  "rejected files with reasons) goes to stdout.");
  dpm_man_section(f, "OPTIONS");
  dpm_flags_man(f, flags, N_FLAGS);
  dpm_man_section(f, "EXAMPLE");
  dpm_man_example(f, "dpm-pack --images t10k-images-idx3-ubyte.gz --labels "
                     "t10k-labels-idx1-ubyte.gz --out fmnist-test --per-shard 5000");
  dpm_man_section(f, "EXIT STATUS");
  dpm_man_para(f, "0 ok; 1 failed; 2 usage.");
  dpm_man_section(f, "SEE ALSO");
  dpm_man_para(f, "dpm-train(1), dpmd(8)");
  return 0;
}

/* 0 to go on; else the exit code (-1: exit 0). */
static int parse(int argc, char **argv, options *o) {
  char msg[256];
  switch (dpm_flags_parse(argc, argv, flags, N_FLAGS, o, NULL, msg, sizeof msg)) {
  case DPM_FLAGS_HELP:
    return usage(NULL) - 1;
  case DPM_FLAGS_VERSION:
    printf("dpm-pack %s\n", DPM_VERSION);
    return -1;
  case DPM_FLAGS_MAN:
    return man() - 1;
  case DPM_FLAGS_USAGE:
    return usage(msg);
  }
  if (!o->folder == !o->images || !o->images != !o->labels)
    return usage("give --images and --labels, or --folder");
  if (!o->out) return usage("--out is required");
  if (!o->format) o->format = "tar";
  if (!o->encode) o->encode = "png";
  if (!o->quality) o->quality = 90;
  if (strcmp(o->format, "tar") && strcmp(o->format, "lmdb"))
    return usage("--format is tar or lmdb");
  if (strcmp(o->encode, "png") && strcmp(o->encode, "jpeg"))
    return usage("--encode is png or jpeg");
  if (o->quality > 100) return usage("--quality is 1..100");
  if (o->resize > 4096) return usage("--resize is 1..4096");
  if (o->folder && (o->resize || strcmp(o->encode, "png")))
    return usage("--resize and --encode apply to IDX input (folder files are stored as "
                 "they are)");
  if (o->per_shard && o->shard_size)
    return usage("--per-shard or --shard-size, not both");
  if (!strcmp(o->format, "lmdb") && (o->per_shard || o->shard_size))
    return usage("--per-shard and --shard-size apply to tar output");
  if (!o->per_shard && !o->shard_size) o->shard_size = 1l << 30;
  return 0;
}

/* ---- input -------------------------------------------------------------------- */

typedef struct packer {
  const options *o;
  /* input */
  dpm_idx_dataset idx;
  dpm_source *src;
  dpm_source_buf sbuf;
  int64_t n, next; /* input samples, the next to take */
  uint8_t *resized;
  /* the sample taken: its encoded bytes, extension, label, shape */
  dpm_bytes enc;
  const char *ext;
  int32_t label;
  int ch, h, w;
  /* counts */
  int64_t written, rejected, shards;
  uint64_t image_bytes, output_bytes;
  char seen[65536]; /* labels written, for the class count (IDX: < 256) */
  int64_t classes;
  char *shown[MAX_REJECTED_SHOWN];
  /* progress */
  int tty;
  double start, next_draw;
} packer;

static void reject(packer *p, const dpm_err *why) {
  if (p->rejected < MAX_REJECTED_SHOWN) p->shown[p->rejected] = strdup(why->msg);
  p->rejected++;
}

static const uint8_t png_sig[8] = {0x89, 'P', 'N', 'G', '\r', '\n', 0x1a, '\n'};

/* Takes the next sample into p->enc and friends: 1 taken, 0 no more, -1
 * failed (err set). Rejected folder files are counted and skipped. */
static int take(packer *p, dpm_err *err) {
  while (p->next < p->n) {
    int64_t i = p->next++;
    if (p->src) {
      dpm_sample smp;
      dpm_err why = {0};
      if (dpm_source_read(p->src, i, &p->sbuf, &smp, &why)) {
        if (why.code != DPM_CORRUPT) {
          *err = why;
          return -1;
        }
        reject(p, &why);
        continue;
      }
      int jpeg = smp.len >= 3 && smp.data[0] == 0xff && smp.data[1] == 0xd8 &&
                 smp.data[2] == 0xff;
      int png = smp.len >= 8 && !memcmp(smp.data, png_sig, 8);
      if ((smp.encoding == DPM_SAMPLE_JPEG && !jpeg) ||
          (smp.encoding == DPM_SAMPLE_PNG && !png)) {
        char k[300];
        dpm_errf(&why, DPM_CORRUPT, "%s: its first bytes are not a %s file's",
                 dpm_escape(dpm_source_key(p->src, i), k, sizeof k),
                 smp.encoding == DPM_SAMPLE_JPEG ? "JPEG" : "PNG");
        reject(p, &why);
        continue;
      }
      if (smp.len > p->enc.cap) {
        uint8_t *d = realloc(p->enc.data, smp.len);
        if (!d) return dpm_errf(err, DPM_NOMEM, "out of memory"), -1;
        p->enc.data = d;
        p->enc.cap = smp.len;
      }
      memcpy(p->enc.data, smp.data, smp.len);
      p->enc.len = smp.len;
      p->ext = jpeg ? "jpg" : "png";
      p->label = smp.label;
      p->ch = p->h = p->w = 0;
      return 1;
    }
    int side = p->o->resize ? (int)p->o->resize : 0;
    const uint8_t *px =
        p->idx.images.data + (size_t)i * (size_t)p->idx.rows * p->idx.cols;
    p->ch = 1, p->h = p->idx.rows, p->w = p->idx.cols;
    if (side) {
      dpm_resize_bilinear(px, p->idx.cols, p->idx.rows, 1, p->resized, side, side);
      px = p->resized;
      p->h = p->w = side;
    }
    dpm_status st =
        strcmp(p->o->encode, "png")
            ? dpm_encode_jpeg(px, p->w, p->h, 1, (int)p->o->quality, &p->enc, err)
            : dpm_encode_png(px, p->w, p->h, 1, &p->enc, err);
    if (st) return -1;
    p->ext = strcmp(p->o->encode, "png") ? "jpg" : "png";
    p->label = p->idx.labels.data[i];
    return 1;
  }
  return 0;
}

static void progress(packer *p) {
  if (!p->tty) return;
  double now = dpm_mono_s();
  if (now < p->next_draw) return;
  p->next_draw = now + REDRAW_S;
  int64_t done = p->next;
  int width = 30, fill = p->n ? (int)(width * done / p->n) : width;
  char bar[40];
  for (int i = 0; i < width; i++) bar[i] = i < fill ? '#' : '.';
  bar[width] = 0;
  fprintf(stderr, "\r[%s] %lld/%lld  %.1f MB of images  %.0f img/s", bar, (long long)done,
          (long long)p->n, (double)p->image_bytes / 1e6,
          (double)p->written / (now - p->start > 1e-9 ? now - p->start : 1e-9));
  fflush(stderr);
}

static void count(packer *p) {
  p->written++;
  p->image_bytes += p->enc.len;
  if (p->label >= 0 && p->label < (int32_t)sizeof p->seen && !p->seen[p->label]) {
    p->seen[p->label] = 1;
    p->classes++;
  }
  progress(p);
}

/* ---- tar output --------------------------------------------------------------- */

typedef struct {
  int fd;
  uint64_t off;
  uint8_t buf[1 << 16];
  size_t len;
} out_file;

static dpm_status flush_out(out_file *f, dpm_err *err) {
  if (f->len && dpm_pwrite_all(f->fd, f->buf, f->len, f->off))
    return dpm_errf(err, DPM_IO, "write: %s", strerror(errno));
  f->off += f->len;
  f->len = 0;
  return DPM_OK;
}

static dpm_status out_put(out_file *f, const void *p, size_t n, dpm_err *err) {
  while (n) {
    size_t k = sizeof f->buf - f->len < n ? sizeof f->buf - f->len : n;
    memcpy(f->buf + f->len, p, k);
    f->len += k, p = (const uint8_t *)p + k, n -= k;
    if (f->len == sizeof f->buf && flush_out(f, err)) return err->code;
  }
  return DPM_OK;
}

static dpm_status out_member(out_file *f, const char *name, const void *p, size_t n,
                             dpm_err *err) {
  uint8_t h[DPM_TAR_BLOCK], zero[DPM_TAR_BLOCK] = {0};
  if (dpm_tar_header(h, name, n, 0))
    return dpm_errf(err, DPM_INVALID, "a member of %zu bytes does not fit a tar header",
                    n);
  dpm_status st = out_put(f, h, sizeof h, err);
  if (!st) st = out_put(f, p, n, err);
  if (!st) st = out_put(f, zero, dpm_tar_pad(n), err);
  return st;
}

typedef struct {
  packer *p;
  int have;  /* a sample taken but not yet written (it opens the next shard) */
  int ended; /* the input is exhausted */
} tar_ctx;

static uint64_t member_bytes(size_t n) { return DPM_TAR_BLOCK + n + dpm_tar_pad(n); }

/* Writes one shard into fd: the pending sample and more while they fit. */
static dpm_status tar_writer(int fd, void *arg, dpm_err *err) {
  tar_ctx *c = arg;
  packer *p = c->p;
  out_file *f = calloc(1, sizeof *f);
  if (!f) return dpm_errf(err, DPM_NOMEM, "out of memory");
  f->fd = fd;
  dpm_status st = DPM_OK;
  int64_t in_shard = 0;
  for (;;) {
    if (!c->have) {
      int r = take(p, err);
      if (r < 0) {
        st = err->code;
        break;
      }
      if (r == 0) {
        c->ended = 1;
        break;
      }
      c->have = 1;
    }
    char cls[16], name[32];
    int cl = snprintf(cls, sizeof cls, "%d", (int)p->label);
    uint64_t need = member_bytes(p->enc.len) + member_bytes((size_t)cl);
    if (in_shard && ((p->o->per_shard && in_shard >= p->o->per_shard) ||
                     (p->o->shard_size &&
                      f->off + f->len + need + DPM_TAR_END > (uint64_t)p->o->shard_size)))
      break; /* the pending sample opens the next shard */
    snprintf(name, sizeof name, "%08lld.%s", (long long)p->written, p->ext);
    if ((st = out_member(f, name, p->enc.data, p->enc.len, err))) break;
    snprintf(name, sizeof name, "%08lld.cls", (long long)p->written);
    if ((st = out_member(f, name, cls, (size_t)cl, err))) break;
    c->have = 0;
    in_shard++;
    count(p);
  }
  uint8_t end[DPM_TAR_END] = {0};
  if (!st) st = out_put(f, end, sizeof end, err);
  if (!st) st = flush_out(f, err);
  p->output_bytes += f->off;
  free(f);
  return st;
}

static dpm_status write_tar(packer *p, dpm_err *err) {
  tar_ctx c = {.p = p};
  char path[PATH_MAX];
  while (!c.ended) {
    if (snprintf(path, sizeof path, "%s-%06lld.tar", p->o->out, (long long)p->shards) >=
        (int)sizeof path)
      return dpm_errf(err, DPM_INVALID, "--out: path too long");
    int64_t before = p->written;
    dpm_status st = dpm_file_write(NULL, path, 1, tar_writer, &c, err);
    if (st) return st;
    if (p->written == before) { /* the input ended exactly at a shard's end */
      if (p->shards) {
        if (unlink(path)) return dpm_errf(err, DPM_IO, "%s: %s", path, strerror(errno));
        break;
      }
    }
    p->shards++;
  }
  return DPM_OK;
}

/* ---- lmdb output -------------------------------------------------------------- */

#define LMDB_BATCH 1000

/* The map size written into the database, which its readers map: twice a
 * bound on what the records take (an encoded image is at most twice its
 * pixels plus 4 KiB; a folder file its size), plus 16 MiB. */
static uint64_t lmdb_map_bytes(const packer *p) {
  uint64_t per;
  if (p->src) return 2 * (dpm_source_bytes(p->src) + (uint64_t)p->n * 256) + (16u << 20);
  int side = (int)p->o->resize;
  per = side ? (uint64_t)side * (uint64_t)side : (uint64_t)p->idx.rows * p->idx.cols;
  return 2 * (uint64_t)p->n * (2 * per + 4096 + 256) + (16u << 20);
}

static dpm_status lmdb_fail(const char *what, int rc, dpm_err *err) {
  return dpm_errf(err, DPM_IO, "lmdb: %s: %s", what, mdb_strerror(rc));
}

/* Writes the database into fd (the temporary data.mdb), through liblmdb
 * opening the same file by /proc/self/fd. */
static dpm_status lmdb_writer(int fd, void *arg, dpm_err *err) {
  packer *p = arg;
  char proc[64];
  snprintf(proc, sizeof proc, "/proc/self/fd/%d", fd);
  MDB_env *env;
  MDB_dbi dbi;
  int rc;
  if ((rc = mdb_env_create(&env))) return lmdb_fail("mdb_env_create", rc, err);
  dpm_status st = DPM_OK;
  uint8_t *rec = NULL;
  size_t rec_cap = 0;
  if ((rc = mdb_env_set_mapsize(env, (size_t)lmdb_map_bytes(p))) ||
      (rc = mdb_env_open(env, proc, MDB_NOSUBDIR | MDB_NOLOCK | MDB_NOSYNC, 0644))) {
    mdb_env_close(env);
    return lmdb_fail("mdb_env_open", rc, err);
  }
  for (int done = 0; !done && !st;) {
    MDB_txn *txn;
    if ((rc = mdb_txn_begin(env, NULL, 0, &txn)) ||
        (rc = mdb_dbi_open(txn, NULL, 0, &dbi))) {
      st = lmdb_fail("mdb_txn_begin", rc, err);
      break;
    }
    for (int k = 0; k < LMDB_BATCH && !st; k++) {
      int r = take(p, err);
      if (r <= 0) {
        st = r < 0 ? err->code : DPM_OK;
        done = 1;
        break;
      }
      size_t need = p->enc.len + 64;
      if (need > rec_cap) {
        uint8_t *q = realloc(rec, need);
        if (!q) {
          st = dpm_errf(err, DPM_NOMEM, "out of memory");
          break;
        }
        rec = q, rec_cap = need;
      }
      size_t n = dpm_datum_write(rec, rec_cap, p->ch, p->h, p->w, p->enc.data, p->enc.len,
                                 p->label, 1);
      char key[32];
      snprintf(key, sizeof key, "%08lld", (long long)p->written);
      MDB_val kv = {strlen(key), key}, vv = {n, rec};
      if ((rc = mdb_put(txn, dbi, &kv, &vv, MDB_APPEND))) {
        st = lmdb_fail("mdb_put", rc, err);
        break;
      }
      count(p);
    }
    if (st) {
      mdb_txn_abort(txn);
    } else if ((rc = mdb_txn_commit(txn))) {
      st = lmdb_fail("mdb_txn_commit", rc, err);
    }
  }
  mdb_env_close(env);
  free(rec);
  return st;
}

static dpm_status write_lmdb(packer *p, dpm_err *err) {
  char path[PATH_MAX];
  if (snprintf(path, sizeof path, "%s/data.mdb", p->o->out) >= (int)sizeof path)
    return dpm_errf(err, DPM_INVALID, "--out: path too long");
  dpm_status st = dpm_file_write(NULL, path, 1, lmdb_writer, p, err);
  if (st) return st;
  int fd;
  if ((st = dpm_file_open_read(NULL, path, &fd, err))) return st;
  off_t size = lseek(fd, 0, SEEK_END);
  close(fd);
  p->output_bytes = size > 0 ? (uint64_t)size : 0;
  p->shards = 1;
  return DPM_OK;
}

/* ---- main --------------------------------------------------------------------- */

static dpm_status open_input(packer *p, dpm_err *err) {
  const options *o = p->o;
  if (o->images) {
    dpm_status st = dpm_idx_dataset_load(NULL, o->images, o->labels, 256, &p->idx, err);
    if (st) return st;
    p->n = p->idx.n;
    if (o->resize && !(p->resized = malloc((size_t)o->resize * (size_t)o->resize)))
      return dpm_errf(err, DPM_NOMEM, "out of memory");
    return DPM_OK;
  }
  const char *paths[] = {o->folder};
  dpm_source_config cfg = {
      .kind = DPM_SOURCE_FOLDER, .paths = paths, .n_paths = 1, .num_classes = INT_MAX};
  dpm_status st = dpm_source_open(&cfg, &p->src, err);
  if (!st) p->n = dpm_source_size(p->src);
  return st;
}

int main(int argc, char **argv) {
  options o = {0};
  int r = parse(argc, argv, &o);
  if (r) return r < 0 ? 0 : r;
  packer *p = calloc(1, sizeof *p);
  if (!p) {
    fprintf(stderr, "dpm-pack: out of memory\n");
    return 1;
  }
  p->o = &o;
  p->tty = !o.no_progress && isatty(STDERR_FILENO);
  p->start = dpm_mono_s();
  dpm_err err = {0};
  dpm_status st = open_input(p, &err);
  if (!st) st = !strcmp(o.format, "tar") ? write_tar(p, &err) : write_lmdb(p, &err);
  if (p->tty) fputs("\r\033[K", stderr);
  double secs = dpm_mono_s() - p->start;
  if (st) {
    fprintf(stderr, "dpm-pack: %s\n", err.msg);
  } else {
    printf("samples: %lld\nclasses: %lld\nshards: %lld\nimage_bytes: %llu\n"
           "output_bytes: %llu\nrejected: %lld\n",
           (long long)p->written, (long long)p->classes, (long long)p->shards,
           (unsigned long long)p->image_bytes, (unsigned long long)p->output_bytes,
           (long long)p->rejected);
    for (int64_t i = 0; i < p->rejected && i < MAX_REJECTED_SHOWN; i++)
      printf("  rejected %s\n", p->shown[i] ? p->shown[i] : "(out of memory)");
    if (p->rejected > MAX_REJECTED_SHOWN)
      printf("  ... and %lld more\n", (long long)(p->rejected - MAX_REJECTED_SHOWN));
    printf("seconds: %.2f\nimages_per_s: %.0f\n", secs,
           secs > 0 ? (double)p->written / secs : 0.0);
  }
  for (int i = 0; i < MAX_REJECTED_SHOWN; i++) free(p->shown[i]);
  dpm_idx_dataset_fini(&p->idx);
  dpm_source_buf_free(&p->sbuf);
  dpm_source_close(p->src);
  dpm_bytes_free(&p->enc);
  free(p->resized);
  free(p);
  return st ? 1 : 0;
}
