/* lane_times.h — the phase times of one lane of a run over every lent GPU
 * (compute/kinds/mgpu.h), one type for the kinds whose lanes are sessions
 * (map/lane.h, reduce/lane.h: map_lane_times and red_lane_times are this
 * type) and for the glue that folds them (mgpu_slowest). C and C++ alike:
 * nothing but the struct, so that the lanes' .cu files take it without
 * mgpu.h's C-only job context.
 */
#ifndef TESSEL_KINDS_LANE_TIMES_H
#define TESSEL_KINDS_LANE_TIMES_H

/* ms: what the lane's thread spent staging and queueing inputs up, its
 * kernels' device time, what it spent bringing results down (each kind's
 * lane.h says which waits go where). */
typedef struct lane_times {
  double h2d, compute, d2h;
} lane_times;

#endif
