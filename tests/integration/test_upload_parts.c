/* test_upload_parts.c — uploads in parts (api/uploads.c,
 * compute/array/codec/parts_upload.c) against the real daemon.
 *
 *  - parts in any order (reversed, shuffled), then complete: the array's
 *    bytes downloaded are the bytes sent, and its id is the one a
 *    one-piece upload of the same .npy gets (200 "already stored"), in
 *    both orders (parts first, or the one-piece upload first);
 *  - eight parts sent at once from eight threads, one connection each;
 *  - complete with a part missing: 409 naming "offset", the message the
 *    missing range; complete while a part is still arriving: 409;
 *  - a part past the end, ending past the end, overlapping a received
 *    part or one still arriving, a negative, absurd or missing offset: 400
 *    naming "offset"; a chunked part (no Content-Length): 400 naming
 *    Content-Length; an empty part: 400;
 *  - an unknown id and another token's upload: 404 for every route;
 *  - DELETE: the upload's file goes, later parts are 404; a DELETE while
 *    a part is arriving answers at once, the part fails, the file goes;
 *  - limits: an upload over --max-upload (413 naming shape), more open
 *    uploads than --max-open-uploads, more bytes than --max-upload-pending
 *    (413), a part over the body cap (413);
 *  - hostile: a part whose body is shorter than its Content-Length and a
 *    client that dies mid-part leave no range received: the same range is
 *    then accepted again; the daemon lives;
 *  - expiry: with --upload-ttl 1, an untouched upload goes (404, its file
 *    removed) — waited for as a state, no fixed sleep;
 *  - the digest hashed as parts come in file order (arrays.c hashes a
 *    piece that starts where the bytes hashed end): parts sent in order
 *    one after the other give the one-piece upload's id; a part at offset
 *    0 that dies after some bytes went into the digest, then sent again
 *    with other bytes, gives the id of the bytes sent last (a digest kept
 *    from the dead part would give a new id) and those bytes;
 *  - all of the above twice: as this machine writes parts by default, and
 *    mapped with the digest's chaser on (TESSEL_PARTS_MAP=1,
 *    TESSEL_PARTS_CHASE=1, the default on 4 CPUs or more);
 *  - parts' pages filled ahead (compute/array/wbehind.c's prefill, forced on with
 *    TESSEL_PARTS_PREFILL=3): parts at once give the bytes and the id; a
 *    delete while a big part arrives stops the fillers, daemon up.
 */
#include <arpa/inet.h>
#include <dirent.h>
#include <netinet/in.h>
#include <pthread.h>
#include <sys/socket.h>

#include "harness.h"

static srv S;
static const char *ALICE = "alice-secret-01234", *BOB = "bob-secret-0123456";

/* A float64 .npy of n elements (values from seed) and its data offset. */
static char *make_npy(long n, double seed, size_t *len, size_t *data_off) {
  char hdr[128];
  int hl = snprintf(hdr, sizeof hdr,
                    "{'descr': '<f8', 'fortran_order': False, 'shape': (%ld,), }", n);
  while ((hl + 11) % 64) hdr[hl++] = ' ';
  hdr[hl - 1] = '\n';
  *data_off = 10 + (size_t)hl;
  *len = *data_off + (size_t)n * 8;
  char *b = malloc(*len);
  memcpy(b, "\x93NUMPY\x01\x00", 8);
  b[8] = (char)(hl & 0xff);
  b[9] = (char)(hl >> 8);
  memcpy(b + 10, hdr, (size_t)hl);
  /* data at 63 mod 64 (the header is not padded to 64): memcpy, the
   * doubles are not aligned */
  for (long i = 0; i < n; i++) {
    double v = seed + (double)i * 0.25;
    memcpy(b + *data_off + (size_t)i * 8, &v, 8);
  }
  return b;
}

/* POST /v1/uploads; the id (malloc) or NULL, *status. */
static char *create(long n, long *status) {
  char body[128];
  snprintf(body, sizeof body, "{\"dtype\":\"float64\",\"shape\":[%ld]}", n);
  resp r = req(&S, "POST", "/v1/uploads", "application/json", body);
  *status = r.status;
  json_t *j = r.status == 201 ? resp_json(&r) : NULL;
  char *id = j && jstr(j, "id") ? strdup(jstr(j, "id")) : NULL;
  if (r.status != 201) fprintf(stderr, "create: %ld %.300s\n", r.status, r.body);
  json_decref(j);
  resp_free(&r);
  return id;
}

static resp put_part(const char *id, long off, const char *p, long n) {
  char path[200];
  snprintf(path, sizeof path, "/v1/uploads/%s?offset=%ld", id, off);
  return reqx(&S, "PUT", path, "application/octet-stream", p, n, NULL);
}

static resp complete(const char *id) {
  char path[200];
  snprintf(path, sizeof path, "/v1/uploads/%s/complete", id);
  return req(&S, "POST", path, NULL, NULL);
}

/* The array's data as .npy equals data[0..bytes). */
static int data_equal(const char *aid, const char *data, size_t bytes) {
  char path[200];
  snprintf(path, sizeof path, "/v1/arrays/%s/data?format=npy", aid);
  resp r = req(&S, "GET", path, NULL, NULL);
  int ok = r.status == 200 && r.len >= bytes &&
           memcmp(r.body + r.len - bytes, data, bytes) == 0;
  resp_free(&r);
  return ok;
}

/* Complete upload `id`: the array id (malloc) or NULL; *status the answer's. */
static char *complete_id(const char *id, long *status) {
  resp r = complete(id);
  *status = r.status;
  json_t *j = resp_json(&r);
  char *aid = j && jstr(j, "id") ? strdup(jstr(j, "id")) : NULL;
  if (!aid) fprintf(stderr, "complete: %ld %.200s\n", r.status, r.body ? r.body : "");
  json_decref(j);
  resp_free(&r);
  return aid;
}

/* Array aid holds the .npy's data, and the same .npy sent in one piece is
 * that array, already stored (200, the same id). */
static void same_as_one_piece(const char *aid, const char *npy, size_t len,
                              size_t off, long bytes, const char *what) {
  CHECK_MSG(aid && data_equal(aid, npy + off, (size_t)bytes), "%s: data", what);
  resp r = reqx(&S, "POST", "/v1/arrays", "application/x-npy", npy, (long)len, NULL);
  json_t *j = resp_json(&r);
  CHECK_MSG(r.status == 200 && j && aid && jstr(j, "id") && strcmp(jstr(j, "id"), aid) == 0,
            "one piece %s: %ld %.200s", what, r.status, r.body);
  json_decref(j);
  resp_free(&r);
}

/* Send the parts [cut[i], cut[i+1]) in the order of `order`; complete. The
 * array id (malloc) or NULL; *status the complete's. */
static char *upload_parts(const char *npy, size_t off, long n, const long *cut,
                          const int *order, int nparts, long *status) {
  long st = 0;
  char *id = create(n, &st);
  CHECK(id && st == 201);
  if (!id) return NULL;
  for (int k = 0; k < nparts; k++) {
    int i = order[k];
    resp r = put_part(id, cut[i], npy + off + cut[i], cut[i + 1] - cut[i]);
    CHECK_MSG(r.status == 200, "part %d: %ld %.200s", i, r.status, r.body);
    resp_free(&r);
  }
  char *aid = complete_id(id, status);
  free(id);
  return aid;
}

TEST(parts_in_any_order_same_id) {
  size_t len, off;
  long n = 131072; /* 1 MiB of data */
  char *npy = make_npy(n, 1.5, &len, &off);
  long bytes = n * 8, cut[9];
  for (int i = 0; i <= 8; i++) cut[i] = bytes * i / 8 - (i > 0 && i < 8 ? 13 * i : 0);
  int rev[8] = {7, 6, 5, 4, 3, 2, 1, 0}, shuf[8] = {3, 0, 7, 5, 1, 6, 2, 4};
  long st = 0;
  char *a1 = upload_parts(npy, off, n, cut, rev, 8, &st);
  CHECK_MSG(a1 && st == 201, "complete: %ld", st);
  /* The same bytes in one piece: the same array, already stored. */
  same_as_one_piece(a1, npy, len, off, bytes, "after reversed parts");
  /* And parts again, shuffled: the same id, 200. */
  char *a2 = upload_parts(npy, off, n, cut, shuf, 8, &st);
  CHECK(a2 && a1 && st == 200 && strcmp(a1, a2) == 0);
  free(a1);
  free(a2);
  /* One piece first, then parts of the same bytes. */
  free(npy);
  npy = make_npy(n, -7.0, &len, &off);
  resp r = reqx(&S, "POST", "/v1/arrays", "application/x-npy", npy, (long)len, NULL);
  json_t *j = resp_json(&r);
  CHECK(r.status == 201 && j);
  a1 = j ? strdup(jstr(j, "id")) : NULL;
  json_decref(j);
  resp_free(&r);
  a2 = upload_parts(npy, off, n, cut, shuf, 8, &st);
  CHECK(a1 && a2 && st == 200 && strcmp(a1, a2) == 0);
  free(a1);
  free(a2);
  free(npy);
}

static int raw_part(const char *id, long off, long cl, long send_n);

/* Both queues of our connection fd to the daemon are empty in
 * /proc/net/tcp: every byte sent was read by the daemon. */
static int socket_drained(int fd) {
  struct sockaddr_in me;
  socklen_t ml = sizeof me;
  if (getsockname(fd, (struct sockaddr *)&me, &ml) != 0) return 0;
  unsigned mine = ntohs(me.sin_port), theirs = (unsigned)S.port;
  FILE *f = fopen("/proc/net/tcp", "r");
  if (!f) return 0;
  char line[512];
  int seen = 0, busy = 0;
  while (fgets(line, sizeof line, f)) {
    unsigned lp, rp;
    unsigned long tx, rx;
    if (sscanf(line, " %*d: %*x:%x %*x:%x %*x %lx:%lx", &lp, &rp, &tx, &rx) != 4)
      continue;
    if ((lp == mine && rp == theirs) || (lp == theirs && rp == mine)) {
      seen++;
      if (tx || rx) busy = 1;
    }
  }
  fclose(f);
  return seen == 2 && !busy;
}

TEST(in_order_and_resent_digest) {
  size_t len, off;
  long n = 131072; /* 1 MiB of data */
  char *npy = make_npy(n, 3.25, &len, &off);
  long bytes = n * 8, cut[5];
  for (int i = 0; i <= 4; i++) cut[i] = bytes * i / 4 - (i > 0 && i < 4 ? 8 * i + 3 : 0);
  int fwd[4] = {0, 1, 2, 3};
  long st = 0;
  /* In order, one after the other: every piece hashed on the way. */
  char *a1 = upload_parts(npy, off, n, cut, fwd, 4, &st);
  CHECK_MSG(a1 && st == 201, "complete: %ld", st);
  same_as_one_piece(a1, npy, len, off, bytes, "after in-order parts");
  free(a1);
  /* A part at 0 that sends 64 KiB of zeros (hashed as they come) and dies;
   * then the real bytes over the same range, and the rest. */
  free(npy);
  npy = make_npy(n, -11.5, &len, &off);
  char *id = create(n, &st);
  CHECK(id && st == 201);
  if (!id) {
    free(npy);
    return;
  }
  int fd = raw_part(id, 0, 262144, 65536);
  CHECK(fd >= 0);
  /* Wait until the daemon has read the dead part's bytes off its socket
   * (nothing queued either way), so they went through the digest. */
  WAIT_FOR(fd < 0 || socket_drained(fd), 20);
  close(fd);
  resp r;
  WAIT_FOR(((r = put_part(id, 0, npy + off, 262144)), r.status == 200) ||
               (resp_free(&r), 0), 10);
  CHECK_MSG(r.status == 200, "resend: %ld %.200s", r.status, r.body);
  resp_free(&r);
  r = put_part(id, 262144, npy + off + 262144, bytes - 262144);
  CHECK(r.status == 200);
  resp_free(&r);
  char *a2 = complete_id(id, &st);
  CHECK_MSG(a2 && st == 201, "complete: %ld", st);
  same_as_one_piece(a2, npy, len, off, bytes, "after a resent part");
  free(a2);
  free(id);
  free(npy);
}

typedef struct part_job {
  const char *id, *p;
  long off, n;
  long status;
} part_job;

static void *send_one(void *arg) {
  part_job *pj = arg;
  resp r = put_part(pj->id, pj->off, pj->p, pj->n);
  pj->status = r.status;
  resp_free(&r);
  return NULL;
}

TEST(parts_at_once_from_threads) {
  size_t len, off;
  long n = 1 << 19; /* 4 MiB */
  char *npy = make_npy(n, 3.0, &len, &off);
  long st = 0, bytes = n * 8;
  char *id = create(n, &st);
  CHECK(id);
  if (!id) {
    free(npy);
    return;
  }
  pthread_t th[8];
  part_job pj[8];
  for (int i = 0; i < 8; i++) {
    pj[i] = (part_job){id, npy + off + bytes * i / 8, bytes * i / 8,
                       bytes * (i + 1) / 8 - bytes * i / 8, 0};
    pthread_create(&th[i], NULL, send_one, &pj[i]);
  }
  for (int i = 0; i < 8; i++) {
    pthread_join(th[i], NULL);
    CHECK_MSG(pj[i].status == 200, "part %d: %ld", i, pj[i].status);
  }
  resp r = complete(id);
  json_t *j = resp_json(&r);
  CHECK_MSG(r.status == 201 && j, "complete: %ld %.200s", r.status, r.body);
  CHECK(j && data_equal(jstr(j, "id"), npy + off, (size_t)bytes));
  json_decref(j);
  resp_free(&r);
  free(id);
  free(npy);
}

/* A raw connection that sends a PUT's headers and `send` bytes of a body
 * announced as `cl`; returns the socket (left open) or -1. */
static int raw_part(const char *id, long off, long cl, long send_n) {
  int fd = socket(AF_INET, SOCK_STREAM, 0);
  struct sockaddr_in a = {.sin_family = AF_INET, .sin_port = htons((uint16_t)S.port)};
  inet_pton(AF_INET, "127.0.0.1", &a.sin_addr);
  if (connect(fd, (struct sockaddr *)&a, sizeof a) != 0) {
    close(fd);
    return -1;
  }
  char h[512];
  int hl = snprintf(h, sizeof h,
                    "PUT /v1/uploads/%s?offset=%ld HTTP/1.1\r\nHost: 127.0.0.1\r\n"
                    "Authorization: Bearer %s\r\nContent-Type: application/octet-stream\r\n"
                    "Content-Length: %ld\r\n\r\n", id, off, ALICE, cl);
  if (write(fd, h, (size_t)hl) != hl) {
    close(fd);
    return -1;
  }
  char *z = calloc(1, (size_t)send_n + 1);
  long w = send_n > 0 ? (long)write(fd, z, (size_t)send_n) : 0;
  free(z);
  if (w != send_n) {
    close(fd);
    return -1;
  }
  return fd;
}

TEST(missing_overlap_out_of_range) {
  long st, n = 3000, bytes = n * 8;
  char *id = create(n, &st);
  if (!id) return;
  char *z = calloc(1, (size_t)bytes);
  resp r = put_part(id, 0, z, 8000);
  CHECK(r.status == 200);
  resp_free(&r);
  r = put_part(id, 16000, z, 8000);
  CHECK(r.status == 200);
  resp_free(&r);
  r = complete(id); /* 8000..15999 missing */
  CHECK(is_error(&r, 409, "conflict", "offset"));
  CHECK_MSG(strstr(r.body, "8000..15999"), "%s", r.body);
  resp_free(&r);
  struct { long off, n; const char *field; long status; } bad[] = {
      {24000, 8, "offset", 400},      /* starts at the end */
      {23999, 8, "offset", 400},      /* ends past it */
      {4000, 8000, "offset", 400},    /* overlaps 0..7999 */
      {7999, 2, "offset", 400},       /* overlaps by one byte */
      {15999, 2, "offset", 400},      /* overlaps 16000.. by one */
      {-5, 8, "offset", 400},         /* negative */
      {9000, 0, "body", 400},         /* empty */
  };
  for (size_t i = 0; i < sizeof bad / sizeof bad[0]; i++) {
    r = put_part(id, bad[i].off, z, bad[i].n);
    CHECK_MSG(is_error(&r, bad[i].status, "invalid_argument", bad[i].field),
              "case %zu", i);
    resp_free(&r);
  }
  char path[200];
  const char *odd[] = {"offset=abc", "offset=99999999999999999999",
                       "offset=9223372036854775807", "offset=", NULL};
  for (int i = 0; odd[i]; i++) {
    snprintf(path, sizeof path, "/v1/uploads/%s?%s", id, odd[i]);
    r = reqx(&S, "PUT", path, "application/octet-stream", z, 8, NULL);
    CHECK_MSG(is_error(&r, 400, "invalid_argument", "offset"), "%s", odd[i]);
    resp_free(&r);
  }
  snprintf(path, sizeof path, "/v1/uploads/%s", id);
  r = reqx(&S, "PUT", path, "application/octet-stream", z, 8, NULL);
  CHECK(is_error(&r, 400, "invalid_argument", "offset")); /* no offset */
  resp_free(&r);
  snprintf(path, sizeof path, "/v1/uploads/%s?offset=8000", id);
  r = reqx(&S, "PUT", path, "application/octet-stream", z, 8, "Transfer-Encoding: chunked", NULL);
  CHECK(is_error(&r, 400, "invalid_argument", "Content-Length"));
  resp_free(&r);
  /* A part still arriving: complete is 409, an overlap with it 400. */
  int fd = raw_part(id, 8000, 8000, 100);
  CHECK(fd >= 0);
  /* Wait until the server holds the part, seen through complete (which
   * changes nothing while bytes are missing): a probe PUT could itself be
   * taken before the part is (a loaded machine did that) and then fill
   * 8000..8007 for good. */
  WAIT_FOR(((r = complete(id)), r.status == 409 && r.body &&
            strstr(r.body, "still arriving")) || (resp_free(&r), 0), 20);
  CHECK(is_error(&r, 409, "conflict", "offset"));
  CHECK_MSG(r.body && strstr(r.body, "still arriving"), "the raw part was never held");
  resp_free(&r);
  r = put_part(id, 8000, z, 8);
  CHECK_MSG(is_error(&r, 400, "invalid_argument", "offset") && strstr(r.body, "still arriving"),
            "in flight overlap: %ld %.200s", r.status, r.body ? r.body : "");
  resp_free(&r);
  close(fd); /* the client dies mid-part: its range is free again */
  WAIT_FOR(((r = put_part(id, 8000, z + 8000, 8000)), r.status == 200) ||
               (resp_free(&r), 0), 10);
  CHECK_MSG(r.status == 200, "resend after a dead client: %ld %.200s", r.status, r.body ? r.body : "");
  resp_free(&r);
  r = complete(id);
  CHECK_MSG(r.status == 201 || r.status == 200, "complete: %ld %.200s", r.status, r.body ? r.body : "");
  resp_free(&r);
  free(z);
  free(id);
}

TEST(short_body_then_resend) {
  long st, n = 1024;
  char *id = create(n, &st);
  if (!id) return;
  /* A body shorter than its Content-Length, then the client half-closes
   * and leaves. */
  int fd = raw_part(id, 0, 8192, 4096);
  CHECK(fd >= 0);
  shutdown(fd, SHUT_WR);
  close(fd);
  char *z = calloc(1, 8192);
  resp r;
  WAIT_FOR(((r = put_part(id, 0, z, 8192)), r.status == 200) || (resp_free(&r), 0), 10);
  CHECK_MSG(r.status == 200, "resend: %ld %.200s", r.status, r.body);
  json_t *j = resp_json(&r);
  CHECK(j && json_integer_value(json_object_get(j, "received")) == 8192);
  json_decref(j);
  resp_free(&r);
  r = complete(id);
  CHECK(r.status == 201 || r.status == 200);
  resp_free(&r);
  free(z);
  free(id);
}

static int tmp_files(const char *dir) {
  char p[400];
  snprintf(p, sizeof p, "%s/arrays", dir);
  DIR *d = opendir(p);
  if (!d) return 0;
  int n = 0;
  struct dirent *de;
  while ((de = readdir(d)))
    if (strstr(de->d_name, ".tmp")) n++;
  closedir(d);
  return n;
}

TEST(unknown_foreign_delete) {
  long st = 0;
  char *id = create(100, &st);
  if (!id) return;
  char path[200], z[800] = {0};
  const char *routes[][2] = {{"GET", ""}, {"POST", "/complete"}, {"DELETE", ""}};
  S.token = BOB; /* another token: not found, every route */
  for (int i = 0; i < 3; i++) {
    snprintf(path, sizeof path, "/v1/uploads/%s%s", id, routes[i][1]);
    resp r = req(&S, routes[i][0], path, NULL, NULL);
    CHECK_MSG(is_error(&r, 404, "not_found", "id"), "bob %s %s", routes[i][0], path);
    resp_free(&r);
  }
  resp r = put_part(id, 0, z, 800);
  CHECK(is_error(&r, 404, "not_found", "id"));
  resp_free(&r);
  S.token = ALICE;
  r = put_part("u_00000000000000000000000000", 0, z, 8);
  CHECK(is_error(&r, 404, "not_found", "id"));
  resp_free(&r);
  r = complete("nonsense");
  CHECK(is_error(&r, 404, "not_found", "id"));
  resp_free(&r);
  int before = tmp_files(S.dir);
  snprintf(path, sizeof path, "/v1/uploads/%s", id);
  r = req(&S, "DELETE", path, NULL, NULL);
  CHECK_MSG(r.status == 200, "delete: %ld", r.status);
  resp_free(&r);
  CHECK_MSG(tmp_files(S.dir) == before - 1, "the upload's file stays");
  r = put_part(id, 0, z, 800);
  CHECK(is_error(&r, 404, "not_found", "id"));
  resp_free(&r);
  free(id);
}

/* DELETE while a part is arriving: the delete answers at once, the part's
 * next bytes fail, and the file goes when the part is gone. */
TEST(delete_while_a_part_arrives) {
  long st, n = 1 << 16; /* 512 KiB */
  char *id = create(n, &st);
  if (!id) return;
  int before = tmp_files(S.dir);
  int fd = raw_part(id, 0, n * 8, 4096);
  CHECK(fd >= 0);
  resp r;
  char *z = calloc(1, 8);
  /* the part is held once complete says so (a probe PUT could be taken
   * before the part is, on a loaded machine) */
  WAIT_FOR(((r = complete(id)), r.body && strstr(r.body, "still arriving") != NULL) ||
               (resp_free(&r), 0), 20);
  CHECK_MSG(r.body && strstr(r.body, "still arriving"), "the raw part was never held");
  resp_free(&r);
  char path[200];
  snprintf(path, sizeof path, "/v1/uploads/%s", id);
  r = req(&S, "DELETE", path, NULL, NULL);
  CHECK_MSG(r.status == 200, "delete: %ld", r.status);
  resp_free(&r);
  r = req(&S, "GET", path, NULL, NULL);
  CHECK(is_error(&r, 404, "not_found", "id"));
  resp_free(&r);
  char *more = calloc(1, 65536); /* the part's next bytes: refused */
  ssize_t w = write(fd, more, 65536);
  (void)w;
  free(more);
  close(fd);
  WAIT_FOR(tmp_files(S.dir) == before - 1, 10);
  CHECK_MSG(tmp_files(S.dir) == before - 1, "the deleted upload's file stays");
  free(z);
  free(id);
}

TEST(limits) {
  long st = 0;
  /* --max-upload 4 MiB: one upload's bytes, and one part's body. */
  char *id = create((4 << 20) / 8 + 1, &st);
  CHECK(!id && st == 413);
  free(id);
  char *ids[3] = {0};
  for (int i = 0; i < 3; i++) { /* --max-open-uploads 3 */
    ids[i] = create(1 << 19, &st); /* 4 MiB each; pending cap 10 MiB */
    CHECK_MSG(i < 2 ? ids[i] != NULL : st == 413, "upload %d: %ld", i, st);
  }
  char *small = create(16, &st);
  CHECK_MSG(small && st == 201, "a third, small: %ld", st);
  char *fourth = create(16, &st);
  CHECK_MSG(!fourth && st == 413, "a fourth open upload: %ld", st);
  free(fourth);
  /* A part over the body cap. */
  char path[200];
  snprintf(path, sizeof path, "/v1/uploads/%s?offset=0", ids[0]);
  long big = (4 << 20) + 16;
  char *z = calloc(1, (size_t)big);
  resp r = reqx(&S, "PUT", path, "application/octet-stream", z, big, NULL);
  CHECK_MSG(r.status == 413, "a part over the cap: %ld", r.status);
  resp_free(&r);
  free(z);
  for (int i = 0; i < 3; i++) {
    if (!ids[i]) continue;
    snprintf(path, sizeof path, "/v1/uploads/%s", ids[i]);
    r = req(&S, "DELETE", path, NULL, NULL);
    resp_free(&r);
    free(ids[i]);
  }
  snprintf(path, sizeof path, "/v1/uploads/%s", small);
  r = req(&S, "DELETE", path, NULL, NULL);
  resp_free(&r);
  free(small);
}

TEST(expiry) {
  srv E;
  if (srv_start(&E, S.daemon, "--upload-ttl", "1", NULL) != 0) {
    CHECK(0);
    return;
  }
  srv keep = S;
  S = E;
  long st = 0;
  char *id = create(1000, &st);
  CHECK(id);
  char z[800] = {0};
  resp r = put_part(id, 0, z, 800);
  CHECK(r.status == 200);
  resp_free(&r);
  CHECK(tmp_files(E.dir) == 1);
  WAIT_FOR(tmp_files(E.dir) == 0, 30);
  CHECK_MSG(tmp_files(E.dir) == 0, "the expired upload's file stays");
  char path[200];
  snprintf(path, sizeof path, "/v1/uploads/%s", id);
  r = req(&S, "GET", path, NULL, NULL);
  CHECK(is_error(&r, 404, "not_found", "id"));
  resp_free(&r);
  free(id);
  srv_cleanup(&E);
  S = keep;
}

/* A daemon that fills parts' pages ahead (TESSEL_PARTS_PREFILL=3; off by
 * default): four 4 MiB parts at once give the bytes
 * sent and the one-piece id; a part dropped and its upload deleted while
 * the filler threads may still run leaves the daemon up and no file. */
TEST(prefilled_parts) {
  setenv("TESSEL_PARTS_PREFILL", "3", 1);
  srv F;
  int started = srv_start(&F, S.daemon, NULL) == 0;
  unsetenv("TESSEL_PARTS_PREFILL");
  CHECK(started);
  if (!started) return;
  srv keep = S;
  S = F;
  size_t len, off;
  long n = 1 << 21; /* 16 MiB */
  char *npy = make_npy(n, 0.125, &len, &off);
  long st = 0, bytes = n * 8;
  char *id = create(n, &st);
  CHECK(id);
  pthread_t th[4];
  part_job pj[4];
  for (int i = 0; id && i < 4; i++) {
    pj[i] = (part_job){id, npy + off + bytes * i / 4, bytes * i / 4,
                       bytes * (i + 1) / 4 - bytes * i / 4, 0};
    pthread_create(&th[i], NULL, send_one, &pj[i]);
  }
  for (int i = 0; id && i < 4; i++) {
    pthread_join(th[i], NULL);
    CHECK_MSG(pj[i].status == 200, "part %d: %ld", i, pj[i].status);
  }
  long cst = 0;
  char *aid = complete_id(id ? id : "u_none", &cst);
  CHECK_MSG(aid && cst == 201, "complete: %ld", cst);
  same_as_one_piece(aid, npy, len, off, bytes, "after prefilled parts");
  free(aid);
  free(id);
  /* A big part begun, its upload deleted at once, then the client gone. */
  id = create(n, &st);
  CHECK(id);
  int fd = id ? raw_part(id, 0, bytes, 65536) : -1;
  CHECK(fd >= 0);
  char path[200];
  snprintf(path, sizeof path, "/v1/uploads/%s", id ? id : "u_none");
  resp r;
  WAIT_FOR(((r = complete(id ? id : "u_none")), r.status == 409 && r.body &&
            strstr(r.body, "still arriving")) || (resp_free(&r), 0), 20);
  resp_free(&r);
  r = req(&S, "DELETE", path, NULL, NULL);
  CHECK(r.status == 200);
  resp_free(&r);
  if (fd >= 0) close(fd);
  WAIT_FOR(tmp_files(F.dir) == 0, 20);
  CHECK_MSG(tmp_files(F.dir) == 0, "the deleted upload's file stays");
  r = req(&S, "GET", "/healthz", NULL, NULL);
  CHECK(r.status == 200);
  resp_free(&r);
  free(id);
  free(npy);
  srv_cleanup(&F);
  S = keep;
}

int main(int argc, char **argv) {
  if (argc < 2) SKIP_ALL("usage: test_upload_parts <tesseld>");
  curl_global_init(CURL_GLOBAL_ALL);
  signal(SIGPIPE, SIG_IGN); /* raw sockets the daemon may have closed */
  char tokens[300];
  snprintf(tokens, sizeof tokens, "/tmp/tessel-tokens-parts-%d", (int)getpid());
  FILE *f = fopen(tokens, "w");
  fprintf(f, "alice:%s\nbob:%s\n", ALICE, BOB);
  fclose(f);
  /* Every rule twice: as this machine writes parts by default, then with
   * the parts copied into the file's mapping and the digest's chaser on
   * (TESSEL_PARTS_MAP=1, TESSEL_PARTS_CHASE=1: the default on 4 CPUs or
   * more, compute/array/codec/pdigest.h). */
  for (int mode = 0; mode < 2; mode++) {
    if (mode) {
      setenv("TESSEL_PARTS_MAP", "1", 1);
      setenv("TESSEL_PARTS_CHASE", "1", 1);
      printf("-- parts mapped, digest chased\n");
    }
    int rc = srv_start(&S, argv[1], "--threads", "1", "--token-file", tokens,
                       "--max-upload", "4194304", "--max-open-uploads", "3",
                       "--max-upload-pending", "10485760", NULL);
    unsetenv("TESSEL_PARTS_MAP");
    unsetenv("TESSEL_PARTS_CHASE");
    if (rc != 0) return 1;
    S.token = ALICE;
    RUN(parts_in_any_order_same_id);
    RUN(parts_at_once_from_threads);
    RUN(missing_overlap_out_of_range);
    RUN(short_body_then_resend);
    RUN(in_order_and_resent_digest);
    RUN(unknown_foreign_delete);
    RUN(delete_while_a_part_arrives);
    RUN(limits);
    resp r = req(&S, "GET", "/healthz", NULL, NULL);
    CHECK(r.status == 200);
    resp_free(&r);
    srv_cleanup(&S);
  }
  unlink(tokens);
  RUN(expiry);
  RUN(prefilled_parts);
  curl_global_cleanup();
  return check_summary();
}
