"""Seed 001: the geopy + multiprocessing.Pool distance matrix, as one call (points are [lat, lon])."""
import os
import numpy as np
import tessel

n = 200 if os.environ.get("TESSEL_EXAMPLE_SMALL") else 2000
lat, lon = np.random.uniform(-80, 80, n), np.random.uniform(-180, 180, n)
distance = tessel.Client().geodesic(np.column_stack([lat, lon]))  # (n, n) metres, Karney's method
print("distance[0, :3] =", distance[0, :3], "m")
p, q = np.radians(lat), np.radians(lon)  # check: within 0.6 % of the sphere's haversine
h = np.sin((p[:, None] - p) / 2) ** 2 + np.cos(p[:, None]) * np.cos(p) * np.sin((q[:, None] - q) / 2) ** 2
np.testing.assert_allclose(distance, 2 * 6371008.8 * np.arcsin(np.sqrt(h)), rtol=6e-3, atol=1e-6)
try:  # and equal to geopy's geodesic (the same method) for a few pairs, when geopy is installed
    from geopy.distance import geodesic
    for i, j in [(0, 1), (2, 3), (n - 1, 0)]:
        np.testing.assert_allclose(distance[i, j], geodesic((lat[i], lon[i]), (lat[j], lon[j])).m, rtol=1e-9)
except ImportError:
    print("geopy not installed: checked against the haversine only")
# Neighbour queries answer without the n x n matrix: each point's 3 nearest (also geodesic_radius, _rowwise)
dist, idx = tessel.Client().geodesic_knn(np.column_stack([lat, lon]), k=3)
np.testing.assert_allclose(dist, np.sort(distance, axis=1)[:, 1:4], rtol=1e-12)  # the matrix's nearest
print("nearest to point 0:", idx[0], dist[0], "m")
