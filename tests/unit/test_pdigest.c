/* test_pdigest.c — compute/array/codec/pdigest.c: the digest of an upload in
 * parts, taken in file order while its parts are written out of order by
 * several threads, equals the one-shot XXH3-128 of the whole data once
 * complete hashes what pdigest_finish leaves past the front — with the
 * chaser and without, with pieces of every size, with more parts than the
 * slot table holds, with a part that fails half-way after its bytes went
 * into the digest and is then sent again with other (the right) bytes, and
 * when freed with parts never ended (an aborted upload). Also that the
 * chaser really hashes behind the front: a part written whole before the
 * one at the front is in the digest before complete asks. Run under ThreadSanitizer by
 * `make test-tsan`.
 */
#include <pthread.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>
#include <xxhash.h>

#include "compute/array/codec/pdigest.h"
#include "check.h"

typedef struct {
  uint64_t off, n;
} range;

typedef struct job {
  pdigest *d;
  char *file;       /* the "mapping" the parts are copied into */
  const char *src;  /* the right bytes */
  range *parts;
  int nparts, nthreads, me;
  size_t maxpiece;
  int fail_part; /* this part is first sent wrong and fails half-way */
  uint64_t seed;
} job;

static uint64_t step(uint64_t *s) {
  *s ^= *s << 13;
  *s ^= *s >> 7;
  *s ^= *s << 17;
  return *s;
}

/* One part, in pieces, copied then reported; wrong: garbage bytes and a
 * failure after half of them. */
static void send_part(job *j, int i, int wrong, uint64_t *seed) {
  range r = j->parts[i];
  int slot = pdigest_begin(j->d, r.off, r.n);
  uint64_t at = 0, stop = wrong ? r.n / 2 : r.n;
  while (at < stop) {
    size_t k = (size_t)(step(seed) % j->maxpiece) + 1;
    if (k > stop - at) k = (size_t)(stop - at);
    char *dst = j->file + r.off + at;
    if (wrong)
      memset(dst, 0x5a, k);
    else
      memcpy(dst, j->src + r.off + at, k);
    pdigest_wrote(j->d, slot, r.off + at, dst, k);
    at += k;
  }
  pdigest_end(j->d, slot, wrong);
}

static void *worker(void *arg) {
  job *j = arg;
  uint64_t seed = j->seed;
  /* Parts me, me + nthreads, ...: neighbours land on different threads at
   * once, as a client's streams send them. */
  for (int i = j->me; i < j->nparts; i += j->nthreads) {
    if (i == j->fail_part) send_part(j, i, 1, &seed);
    send_part(j, i, 0, &seed);
  }
  return NULL;
}

/* n bytes in nparts parts by nthreads; returns the bytes finish left. */
static uint64_t run(uint64_t n, int nparts, int nthreads, size_t maxpiece,
                    int chase, int mapped, int fail_part) {
  char *src = malloc(n), *file = calloc(1, n);
  uint64_t s = 0x9e3779b97f4a7c15ULL ^ n ^ (uint64_t)nparts;
  for (uint64_t i = 0; i < n; i++) src[i] = (char)(step(&s) >> 56);
  XXH128_hash_t want = XXH3_128bits(src, n);
  range *parts = calloc((size_t)nparts, sizeof *parts);
  uint64_t each = n / (uint64_t)nparts;
  for (int i = 0; i < nparts; i++) {
    parts[i].off = (uint64_t)i * each;
    parts[i].n = i == nparts - 1 ? n - parts[i].off : each;
  }
  XXH3_state_t *h = XXH3_createState();
  XXH3_128bits_reset(h);
  pdigest *d = pdigest_new(h, mapped ? file : NULL, n, chase);
  CHECK(d != NULL);
  job jobs[16];
  pthread_t th[16];
  for (int t = 0; t < nthreads; t++) {
    jobs[t] = (job){d, file, src, parts, nparts, nthreads, t, maxpiece,
                    fail_part, 0x1234567ULL * (uint64_t)(t + 1)};
    CHECK(pthread_create(&th[t], NULL, worker, &jobs[t]) == 0);
  }
  for (int t = 0; t < nthreads; t++) pthread_join(th[t], NULL);
  uint64_t front = pdigest_finish(d);
  CHECK(front <= n);
  CHECK(memcmp(file, src, n) == 0);
  if (front < n) XXH3_128bits_update(h, file + front, (size_t)(n - front));
  XXH128_hash_t got = XXH3_128bits_digest(h);
  CHECK_MSG(XXH128_isEqual(got, want), "n %llu parts %d threads %d chase %d "
            "mapped %d fail %d front %llu", (unsigned long long)n, nparts,
            nthreads, chase, mapped, fail_part, (unsigned long long)front);
  pdigest_free(d);
  XXH3_freeState(h);
  free(parts);
  free(src);
  free(file);
  return n - front;
}

/* Parts begun and written, never ended: free stops the chaser and
 * returns (the aborted upload). */
TEST(abort_frees) {
  enum { N = 4 << 20 };
  char *file = calloc(1, N);
  XXH3_state_t *h = XXH3_createState();
  XXH3_128bits_reset(h);
  pdigest *d = pdigest_new(h, file, N, 1);
  int a = pdigest_begin(d, 0, N / 2), b = pdigest_begin(d, N / 2, N / 2);
  CHECK(a >= 0 && b >= 0 && a != b);
  pdigest_wrote(d, b, N / 2, file + N / 2, 4096);
  CHECK(pdigest_wrote(d, a, 0, file, 4096) == 1); /* at the front: hashed */
  pdigest_free(d);
  XXH3_freeState(h);
  free(file);
}

/* The chaser hashes behind the front: part B is written whole before part
 * A, the one at the front; once A is in (hashed on the way), the chaser
 * takes B from the mapping without anybody writing again: the front
 * reaches the end before finish (waited for, up to 30 s). */
TEST(chaser_follows) {
  enum { N = 8 << 20 };
  char *file = malloc(N);
  for (int i = 0; i < N; i++) file[i] = (char)(i * 7);
  XXH3_state_t *h = XXH3_createState();
  XXH3_128bits_reset(h);
  pdigest *d = pdigest_new(h, file, N, 1);
  int a = pdigest_begin(d, 0, N / 2), b = pdigest_begin(d, N / 2, N / 2);
  for (int off = N / 2; off < N; off += 65536)
    CHECK(pdigest_wrote(d, b, (uint64_t)off, file + off, 65536) == 0);
  pdigest_end(d, b, 0);
  for (int off = 0; off < N / 2; off += 65536)
    CHECK(pdigest_wrote(d, a, (uint64_t)off, file + off, 65536) == 1);
  pdigest_end(d, a, 0);
  for (int i = 0; i < 30000 && pdigest_front(d) < N; i++) {
    struct timespec t = {0, 1000000};
    nanosleep(&t, NULL);
  }
  CHECK_MSG(pdigest_front(d) == N, "front %llu",
            (unsigned long long)pdigest_front(d));
  CHECK(pdigest_finish(d) == N);
  XXH128_hash_t got = XXH3_128bits_digest(h), want = XXH3_128bits(file, N);
  CHECK(XXH128_isEqual(got, want));
  pdigest_free(d);
  XXH3_freeState(h);
  free(file);
}

TEST(one_part_hashed_on_the_way) {
  CHECK(run(3 << 20, 1, 1, 70000, 1, 1, -1) == 0);
}

/* Parts at once, every combination of chaser and mapping. */
TEST(parts_at_once_equal_one_shot) {
  for (int chase = 0; chase <= 1; chase++)
    for (int mapped = 0; mapped <= 1; mapped++) {
      run(24 << 20, 16, 8, 131072, chase, mapped, -1);
      run((24 << 20) + 12345, 7, 3, 977, chase, mapped, -1);
      run(1 << 20, 600, 4, 4096, chase, mapped, -1); /* > the slot table */
    }
}

TEST(failed_part_sent_again) {
  for (int chase = 0; chase <= 1; chase++) {
    run(8 << 20, 12, 4, 65536, chase, 1, 0); /* the first one fails */
    run(8 << 20, 12, 4, 65536, chase, 1, 5);
    run(8 << 20, 12, 4, 65536, chase, 0, 5);
  }
}

int main(void) {
  RUN(one_part_hashed_on_the_way);
  RUN(parts_at_once_equal_one_shot);
  RUN(failed_part_sent_again);
  RUN(chaser_follows);
  RUN(abort_frees);
  return check_summary();
}
