"""geodesic_geopy.py — the seeds' distance matrix, as the peer of
bench_geodesic.c: geopy's geodesic() one pair at a time, the pairs (i, j),
j > i, mapped over a multiprocessing.Pool, the matrix filled from the
results and mirrored (seed 001, "DistanceGeoParallel"). Each task carries
the coordinate arrays, as the seeds' args_list does.

    /usr/bin/python3 tests/bench/geodesic_geopy.py N [PROCESSES]

Prints "geopy pairs P seconds S" (the whole function: Pool start, map,
fill) for bench_geodesic to read. Points are uniform on the sphere. The
seeds pass (lon, lat); geopy wants (lat, lon), which is used here.
Needs Debian's python3-geopy and python3-numpy (/usr/bin/python3).
"""
import sys
import time
from multiprocessing import Pool

import numpy as np
from geopy.distance import geodesic


def calculate_distance(args):
    i, j, lat, lon = args
    d = geodesic((lat[i], lon[i]), (lat[j], lon[j])).m
    return i, j, d


def distance_geo_parallel(lat, lon, processes):
    n = len(lat)
    distance = np.zeros((n, n))
    args_list = [(i, j, lat, lon) for i in range(n) for j in range(i + 1, n)]
    with Pool(processes) as pool:
        results = pool.map(calculate_distance, args_list)
    for i, j, d in results:
        distance[i, j] = d
        distance[j, i] = d
    return distance


def main():
    n = int(sys.argv[1]) if len(sys.argv) > 1 else 400
    procs = int(sys.argv[2]) if len(sys.argv) > 2 else None
    rng = np.random.default_rng(7)
    lat = np.degrees(np.arcsin(2 * rng.random(n) - 1))
    lon = 360 * rng.random(n) - 180
    t0 = time.perf_counter()
    d = distance_geo_parallel(lat, lon, procs)
    secs = time.perf_counter() - t0
    assert d.shape == (n, n) and d[0, 1] == d[1, 0] > 0
    print("geopy pairs %d seconds %.6f" % (n * (n - 1) // 2, secs))


if __name__ == "__main__":
    main()
