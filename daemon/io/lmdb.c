/* Caffe/Caffe2 LMDBs of Datum records: the index pass (io/source.h, kind
 * lmdb).
 *
 * The path is a database directory (its data.mdb is read) or, when it ends
 * in ".mdb", the data file itself. That file is opened through the source's
 * fs, and liblmdb opens the very same file through /proc/self/fd/N, so the
 * fs's confinement holds (liblmdb never resolves the path a client gave).
 * Read-only, no lock file: MDB_RDONLY | MDB_NOLOCK | MDB_NOSUBDIR, and no
 * read-ahead. One read transaction walks every record with a cursor, in key
 * order; each value is parsed as a Datum (io/datum.h) and the index keeps
 * where its image bytes lie in data.mdb: the value's address minus the
 * map's address (map_base), plus the data field's offset in the value
 * (liblmdb maps the file from offset 0; a value is contiguous in the map,
 * in its page or in its run of overflow pages). The environment is closed before open
 * returns: reads are preads of data.mdb (io/source.c), which see a changed
 * file as any shard's, and no thread touches liblmdb or its map again.
 *
 * Encoded Datums: the image format is told by its first bytes (JPEG
 * FF D8 FF, PNG's 8-byte signature); raw ones (encoded false) need
 * channels x height x width == the data's length, each side 1..65535.
 *
 * A file shorter than the pages its meta page counts is refused before the
 * walk, so no page liblmdb visits lies past the end of the file; a value
 * is checked to lie inside the file before its bytes are parsed.
 *
 * Not covered: liblmdb trusts the structure inside its pages (node
 * offsets, overflow page counts); a crafted data.mdb can make it read
 * outside a page, and a file truncated while the index pass runs would
 * fault (SIGBUS) in the map. */
#include <errno.h>
#include <lmdb.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

#include "common/escape.h"
#include "common/file.h"
#include "io/datum.h"
#include "io/source_index.h"

#define MAX_SIDE 65535

static dpm_status lmdb_err(const char *path, const char *what, int rc, dpm_err *err) {
  char b[256];
  return dpm_errf(err, DPM_CORRUPT, "%s: %s: %s", dpm_escape(path, b, sizeof b), what,
                  mdb_strerror(rc));
}

/* The address at which liblmdb mapped the file, from a value in the map:
 * the value lies in a page of psize bytes (its leaf page, or the first of
 * its overflow pages) whose header starts with the page's number, so the
 * map starts pgno pages before that page. liblmdb's page header layout
 * (pgno_t first) is that of every 0.9 release; every record must agree on
 * the result, which the caller checks. */
static uintptr_t map_base(const uint8_t *val, unsigned psize) {
  uintptr_t page = (uintptr_t)val / psize * psize;
  size_t pgno;
  memcpy(&pgno, (const void *)page, sizeof pgno);
  return page - (uintptr_t)pgno * psize;
}

static const uint8_t png_sig[8] = {0x89, 'P', 'N', 'G', '\r', '\n', 0x1a, '\n'};

/* The sample of one record: value v of length n at file offset base. */
static src_item datum_item(const uint8_t *v, size_t n, uint64_t base) {
  src_item it = {.label = -1};
  dpm_datum d;
  dpm_err e;
  if (dpm_datum_parse(v, n, &d, &e)) {
    it.bad = DPM_BAD_NOT_DATUM;
    return it;
  }
  it.label = d.label >= INT32_MIN && d.label <= INT32_MAX ? (int32_t)d.label : -1;
  if (!d.has_data || !d.data_len) {
    it.bad = DPM_BAD_DATUM; /* float_data only, or empty */
    return it;
  }
  const uint8_t *p = v + d.data_off;
  it.off = base + d.data_off;
  it.len = d.data_len;
  if (d.encoded) {
    if (d.data_len >= 3 && p[0] == 0xff && p[1] == 0xd8 && p[2] == 0xff)
      it.enc = DPM_SAMPLE_JPEG;
    else if (d.data_len >= 8 && !memcmp(p, png_sig, 8))
      it.enc = DPM_SAMPLE_PNG;
    else
      it.bad = DPM_BAD_DATUM;
    return it;
  }
  if (d.channels < 1 || d.channels > MAX_SIDE || d.height < 1 || d.height > MAX_SIDE ||
      d.width < 1 || d.width > MAX_SIDE ||
      (uint64_t)d.channels * (uint64_t)d.height * (uint64_t)d.width != d.data_len) {
    it.bad = DPM_BAD_DATUM;
    return it;
  }
  it.enc = DPM_SAMPLE_RAW;
  it.channels = (uint16_t)d.channels;
  it.height = (uint16_t)d.height;
  it.width = (uint16_t)d.width;
  return it;
}

dpm_status dpm_lmdb_index(dpm_source *s, const dpm_source_config *cfg, dpm_err *err) {
  const char *given = cfg->paths[0];
  size_t gl = strlen(given);
  char path[4096], b[256];
  int nosubdir = gl >= 4 && !strcmp(given + gl - 4, ".mdb");
  if (snprintf(path, sizeof path, nosubdir ? "%s" : "%s/data.mdb", given) >=
      (int)sizeof path)
    return dpm_errf(err, DPM_INVALID, "%s: path too long",
                    dpm_escape(given, b, sizeof b));
  int fd;
  struct stat sb;
  dpm_status st = dpm_file_open_read(s->fs, path, &fd, err);
  if (st) return st;
  if (fstat(fd, &sb)) {
    st = dpm_errf(err, DPM_IO, "%s: %s", dpm_escape(path, b, sizeof b), strerror(errno));
    close(fd);
    return st;
  }
  if ((st = dpm_src_add_shard(s, path, fd, &sb, -1, err))) return st;
  char proc[64];
  snprintf(proc, sizeof proc, "/proc/self/fd/%d", fd);
  MDB_env *env = NULL;
  MDB_txn *txn = NULL;
  MDB_cursor *cur = NULL;
  MDB_dbi dbi;
  int rc;
  if ((rc = mdb_env_create(&env))) return lmdb_err(path, "mdb_env_create", rc, err);
  if ((rc = mdb_env_open(env, proc,
                         MDB_RDONLY | MDB_NOLOCK | MDB_NOSUBDIR | MDB_NORDAHEAD, 0)))
    st = lmdb_err(path, "not an LMDB data file", rc, err);
  else if ((rc = mdb_txn_begin(env, NULL, MDB_RDONLY, &txn)))
    st = lmdb_err(path, "mdb_txn_begin", rc, err);
  else if ((rc = mdb_dbi_open(txn, NULL, 0, &dbi)))
    st = lmdb_err(path, "mdb_dbi_open", rc, err);
  else if ((rc = mdb_cursor_open(txn, dbi, &cur)))
    st = lmdb_err(path, "mdb_cursor_open", rc, err);
  MDB_stat ms;
  MDB_envinfo info;
  if (!st && (rc = mdb_env_stat(env, &ms))) st = lmdb_err(path, "mdb_env_stat", rc, err);
  if (!st && (rc = mdb_env_info(env, &info)))
    st = lmdb_err(path, "mdb_env_info", rc, err);
  /* liblmdb reads no page at or past the last one its meta page names
   * (mdb_page_get): with all of them inside the file, the walk touches
   * no mapped byte past its end */
  if (!st && (info.me_last_pgno >= (size_t)sb.st_size / ms.ms_psize))
    st = dpm_errf(err, DPM_CORRUPT, "%s: shorter than its pages (truncated?)",
                  dpm_escape(path, b, sizeof b));
  uintptr_t map = 0; /* the map's address, found from the first record */
  MDB_val k, v;
  for (MDB_cursor_op op = MDB_FIRST; !st; op = MDB_NEXT) {
    rc = mdb_cursor_get(cur, &k, &v, op);
    if (rc == MDB_NOTFOUND) break;
    if (rc) {
      st = lmdb_err(path, "reading a record", rc, err);
      break;
    }
    const uint8_t *val = v.mv_data;
    uintptr_t base = map_base(val, ms.ms_psize);
    if (!map) map = base;
    uint64_t off = (uintptr_t)val - map;
    if (base != map || (uintptr_t)val < map || off > (uint64_t)sb.st_size ||
        v.mv_size > (uint64_t)sb.st_size - off) {
      st = dpm_errf(err, DPM_CORRUPT, "%s: a record lies outside the file",
                    dpm_escape(path, b, sizeof b));
      break;
    }
    src_item it = datum_item(val, v.mv_size, off);
    st = dpm_src_add_item(s, k.mv_data, k.mv_size, it, err);
  }
  if (cur) mdb_cursor_close(cur);
  if (txn) mdb_txn_abort(txn);
  mdb_env_close(env);
  return st;
}
