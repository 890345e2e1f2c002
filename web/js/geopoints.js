/* geopoints.js — a geodesic job's points (and targets), read in the page for
 * its world map.
 *
 * readPoints(value, signal) takes params.points (or params.targets) of the
 * job object as the API gives it and answers {lat, lon, n, cut} (two
 * Float64Arrays of degrees; cut: how many rows were left out beyond
 * MAX_POINTS) or {why} when the page cannot have them. Every array value
 * form of API.md "Array values":
 *  - nested JSON arrays: taken from the params as they are;
 *  - {"random": …}: generated here, the service's own counter-based
 *    generator (compute/array/arrayval.c: SplitMix64, element i depends only on
 *    (seed, i); normal through the same Box–Muller), in BigInt, so the map
 *    shows the very points the job used without downloading them. Uniform
 *    values are the same bits; normal ones are within an ulp of libm's;
 *  - {"array": id}: GET /v1/arrays/{id}/data as .npy, first rows only;
 *  - {"result": id (, "part")}: that job's result (or part) as .npy;
 *  - {"file": …} (on the server's disk) and {"range": …} (1-D, no n × 2):
 *    {why}, said on the page instead of a map.
 * Pure but for the fetch through api.js; no DOM.
 */
import {getBytes, jobsApi} from './api.js';
import {parseNpy} from './npy.js';

export const MAX_POINTS = 100000;

const M64 = (1n << 64n) - 1n;
const GAMMA = 0x9E3779B97F4A7C15n;

function mix(z) {
  z = ((z ^ (z >> 30n)) * 0xBF58476D1CE4E5B9n) & M64;
  z = ((z ^ (z >> 27n)) * 0x94D049BB133111EBn) & M64;
  return z ^ (z >> 31n);
}

/* Output i of the SplitMix64 stream whose state starts at key, in [0, 1). */
function u53(key, i) {
  return Number(mix((key + (BigInt(i) + 1n) * GAMMA) & M64) >> 11n) * 2 ** -53;
}

/* Elements 0 … count-1 of a {"random": spec} value, as the service makes them. */
export function randomValues(spec, count) {
  const key = mix((BigInt(spec.seed || 0) + GAMMA) & M64);
  const out = new Float64Array(count);
  if (spec.dist === 'normal') {
    const mean = spec.mean ?? 0;
    const std = spec.std ?? 1;
    for (let i = 0; i < count; i += 2) {
      const r = Math.sqrt(-2 * Math.log(1 - u53(key, i)));
      const t = 6.283185307179586 * u53(key, i + 1);
      out[i] = mean + std * r * Math.cos(t);
      if (i + 1 < count) out[i + 1] = mean + std * r * Math.sin(t);
    }
  } else {
    const low = spec.low ?? 0;
    const high = spec.high ?? 1;
    for (let i = 0; i < count; i += 1) out[i] = low + (high - low) * u53(key, i);
  }
  return out;
}

function fromFlat(data, rows) {
  const n = Math.min(rows, MAX_POINTS);
  const lat = new Float64Array(n);
  const lon = new Float64Array(n);
  for (let i = 0; i < n; i += 1) { lat[i] = data[2 * i]; lon[i] = data[2 * i + 1]; }
  return {lat, lon, n, cut: rows - n};
}

async function fromNpy(url, signal) {
  const a = parseNpy(await getBytes(url, {signal}));
  if (a.shape.length !== 2 || a.shape[1] !== 2) return {why: `the points are ${a.shape.join(' × ')}, not n × 2`};
  return fromFlat(a.data, a.shape[0]);
}

export async function readPoints(value, signal) {
  if (Array.isArray(value)) {
    if (!value.every((r) => Array.isArray(r) && r.length === 2)) return {why: 'the points are not n × 2'};
    return fromFlat(value.flat(), value.length);
  }
  if (!value || typeof value !== 'object') return {why: 'no points in the params'};
  if (value.random) {
    const shape = value.random.shape || [];
    if (shape.length !== 2 || shape[1] !== 2) return {why: 'the random points are not n × 2'};
    const rows = Math.min(shape[0], MAX_POINTS);
    return {...fromFlat(randomValues(value.random, rows * 2), rows), cut: shape[0] - rows};
  }
  const lim = {format: 'npy', limit_rows: MAX_POINTS};
  if (value.array) return fromNpy(`/v1/arrays/${encodeURIComponent(value.array)}/data?format=npy&limit_rows=${MAX_POINTS}`, signal);
  if (value.result) {
    return fromNpy(value.part ? jobsApi.partUrl(value.result, value.part, lim) : jobsApi.resultUrl(value.result, lim), signal);
  }
  if (value.file) return {why: 'the points are a file on the server\'s disk, which the page cannot read'};
  return {why: 'the points are not an n × 2 array the page can read'};
}
