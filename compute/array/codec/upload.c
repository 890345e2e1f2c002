/* upload.c — uploads read as their bytes arrive (upload.h): .npy, then
 * CSV and JSON (at the end).
 *
 * Two phases: HEAD collects bytes until npy_head_need is satisfied, then
 * reads the header, opens the writer (file created, blocks reserved) and
 * hands whatever followed the header in the same piece to DATA; DATA
 * writes float data through as it comes, or converts integer elements,
 * carrying an element split between two pieces (at most 7 bytes) over.
 */
#include "compute/array/codec/upload.h"

#include <stdlib.h>
#include <string.h>

#define HEAD_MAX (12 + 10000) /* preamble + the largest header accepted */
#define CONV_ELEMS 8192       /* doubles converted per write: 64 KiB */

struct npy_upload {
  arrays *A;
  int64_t max_elems, declared;
  uint64_t fed;        /* body bytes so far */
  int in_data;
  size_t head_len;
  npy_head h;
  array_writer *w;
  unsigned char carry[8];
  size_t ncarry;
  double *conv;
  unsigned char head[HEAD_MAX];
};

uint64_t npy_upload_bytes(const npy_upload *u) { return u->fed; }

int npy_upload_begin(arrays *A, int64_t max_elems, int64_t declared,
                     npy_upload **out, terr *e) {
  npy_upload *u = calloc(1, sizeof *u);
  *out = u;
  if (!u) return terr_set(e, T_ENOMEM, "", -1, "out of memory");
  u->A = A;
  u->max_elems = max_elems;
  u->declared = declared;
  return T_OK;
}

void npy_upload_abort(npy_upload *u) {
  if (!u) return;
  arrays_writer_abort(u->w);
  free(u->conv);
  free(u);
}

/* The reader names no field: it is the body. */
static int body_err(terr *e, int rc) {
  if (rc && !e->field[0]) {
    char msg[TERR_MSG_MAX];
    snprintf(msg, sizeof msg, "%s", e->message);
    terr_set(e, e->code, "body", e->position, "%s", msg);
  }
  return rc;
}

/* Integer data: convert whole elements, carry a split one over. */
static int feed_convert(npy_upload *u, const unsigned char *p, size_t n,
                        terr *e) {
  size_t isz = (size_t)u->h.src_itemsize;
  int rc;
  if (u->ncarry) {
    size_t take = isz - u->ncarry < n ? isz - u->ncarry : n;
    memcpy(u->carry + u->ncarry, p, take);
    u->ncarry += take;
    p += take;
    n -= take;
    if (u->ncarry < isz) return T_OK;
    npy_head_convert(&u->h, u->carry, 1, u->conv);
    u->ncarry = 0;
    if ((rc = arrays_writer_write(u->w, u->conv, sizeof(double), e)))
      return rc;
  }
  while (n >= isz) {
    size_t k = n / isz < CONV_ELEMS ? n / isz : CONV_ELEMS;
    npy_head_convert(&u->h, p, (int64_t)k, u->conv);
    if ((rc = arrays_writer_write(u->w, u->conv, k * sizeof(double), e)))
      return rc;
    p += k * isz;
    n -= k * isz;
  }
  memcpy(u->carry, p, n);
  u->ncarry = n;
  return T_OK;
}

/* Data bytes; the body offset of p is u->fed (already counted). */
static int feed_data(npy_upload *u, const unsigned char *p, size_t n,
                     terr *e) {
  uint64_t at = u->fed - n - u->h.data_off; /* data bytes before p */
  if (n > u->h.src_bytes - at)
    return terr_set(e, T_EINVAL, "body", (int64_t)(u->h.data_off + u->h.src_bytes),
                    "npy: data is longer than shape x itemsize (%llu bytes)",
                    (unsigned long long)u->h.src_bytes);
  if (npy_head_native(&u->h)) return arrays_writer_write(u->w, p, n, e);
  return feed_convert(u, p, n, e);
}

/* The header is in: check it, open the file. */
static int head_done(npy_upload *u, terr *e) {
  int rc = npy_head_read(u->head, u->head_len, u->max_elems, &u->h, e);
  if (rc) return body_err(e, rc);
  if (u->declared >= 0 &&
      (uint64_t)u->declared != u->h.data_off + u->h.src_bytes)
    return terr_set(e, T_EINVAL, "body", u->declared,
                    "npy: data is %llu bytes, shape x itemsize needs %llu",
                    (unsigned long long)((uint64_t)u->declared > u->h.data_off
                                             ? (uint64_t)u->declared - u->h.data_off
                                             : 0),
                    (unsigned long long)u->h.src_bytes);
  if (!npy_head_native(&u->h) &&
      !(u->conv = malloc(CONV_ELEMS * sizeof(double))))
    return terr_set(e, T_ENOMEM, "", -1, "out of memory");
  return arrays_writer_open(u->A, u->h.dtype, u->h.ndim, u->h.shape, &u->w, e);
}

int npy_upload_feed(npy_upload *u, const void *buf, size_t n, terr *e) {
  const unsigned char *p = buf;
  if (u->in_data) {
    u->fed += n;
    return feed_data(u, p, n, e);
  }
  while (n) {
    size_t need = npy_head_need(u->head, u->head_len);
    if (need > HEAD_MAX) need = HEAD_MAX;
    if (u->head_len >= need) break;
    size_t take = need - u->head_len < n ? need - u->head_len : n;
    memcpy(u->head + u->head_len, p, take);
    u->head_len += take;
    u->fed += take;
    p += take;
    n -= take;
    if (u->head_len == need && npy_head_need(u->head, u->head_len) <= need) {
      int rc = head_done(u, e);
      if (rc) return rc;
      u->in_data = 1;
      if (!n) return T_OK;
      u->fed += n;
      return feed_data(u, p, n, e);
    }
  }
  return T_OK;
}

int npy_upload_end(npy_upload *u, const char *owner, store_array *rec,
                   int *existing, terr *e) {
  memset(rec, 0, sizeof *rec);
  *existing = 0;
  int rc;
  if (!u->in_data) { /* the body ended inside the preamble or header */
    npy_head h;
    rc = npy_head_read(u->head, u->head_len, u->max_elems, &h, e);
    if (rc == T_OK) /* cannot be: the header was never complete */
      rc = terr_set(e, T_EINVAL, "body", (int64_t)u->fed,
                    "npy: truncated header");
    rc = body_err(e, rc);
  } else if (arrays_writer_missing(u->w) || u->ncarry) {
    uint64_t got = u->fed - u->h.data_off;
    rc = terr_set(e, T_EINVAL, "body", (int64_t)u->fed,
                  "npy: data is %llu bytes, shape x itemsize needs %llu",
                  (unsigned long long)got,
                  (unsigned long long)u->h.src_bytes);
  } else {
    array_writer *w = u->w;
    u->w = NULL;
    rc = arrays_writer_commit(w, owner, rec, existing, e);
  }
  npy_upload_abort(u);
  return rc;
}

/* ---- CSV and JSON ---------------------------------------------------------
 * The push reader is fed the pieces as they come; its values go to the
 * writer (tvals_out below); at the end the reader gives the shape, the
 * writer writes the header and commits. */
struct text_upload {
  array_writer *w;
  csv_push *csv;
  json_push *json;
  uint64_t fed;
};

uint64_t text_upload_bytes(const text_upload *u) { return u->fed; }

static int out_write(void *ud, const void *p, size_t n, terr *e) {
  return arrays_writer_write(ud, p, n, e);
}

static void out_restart(void *ud) { arrays_writer_restart(ud); }

void text_upload_abort(text_upload *u) {
  if (!u) return;
  arrays_writer_abort(u->w);
  csv_push_free(u->csv);
  json_push_free(u->json);
  free(u);
}

int text_upload_begin(arrays *A, int json, tdtype dt, int64_t max_elems,
                      text_upload **out, terr *e) {
  *out = NULL;
  text_upload *u = calloc(1, sizeof *u);
  if (!u) return terr_set(e, T_ENOMEM, "", -1, "out of memory");
  int rc = arrays_writer_open_stream(A, json ? dt : T_F64, &u->w, e);
  if (!rc) {
    tvals_out o = {out_write, out_restart, u->w};
    rc = json ? json_push_new(dt, max_elems, &o, &u->json, e)
              : csv_push_new(max_elems, 0, &o, &u->csv, e);
  }
  if (rc) {
    text_upload_abort(u);
    return rc;
  }
  *out = u;
  return T_OK;
}

int text_upload_feed(text_upload *u, const void *p, size_t n, terr *e) {
  u->fed += n;
  return u->json ? json_push_feed(u->json, p, n, e)
                 : csv_push_feed(u->csv, p, n, e);
}

int text_upload_end(text_upload *u, const char *owner, store_array *rec,
                    int *existing, terr *e) {
  memset(rec, 0, sizeof *rec);
  *existing = 0;
  int ndim;
  int64_t shape[T_MAXDIM];
  int rc = u->json ? json_push_end(u->json, &ndim, shape, e)
                   : csv_push_end(u->csv, &ndim, shape, e);
  if (!rc) rc = arrays_writer_shape(u->w, ndim, shape, e);
  if (!rc) {
    array_writer *w = u->w;
    u->w = NULL;
    rc = arrays_writer_commit(w, owner, rec, existing, e);
  }
  text_upload_abort(u);
  return rc;
}
