/* npy.js — reads a NumPy .npy file (the API's `?format=npy` answer) into a
 * typed array, for pages that need many rows of a result without the
 * JSON's size (the neighbour table reads a knn job's parts this way).
 *
 * parseNpy(ArrayBuffer) -> {dtype, shape, data}: format versions 1 to 3,
 * little-endian '<f8', '<f4' and '<i8' (the dtypes the API writes), C order
 * only. data is a Float64Array, a Float32Array, or for '<i8' a Float64Array
 * of the integers as Numbers (exact below 2^53; every index and count the
 * API gives is far below). Anything else throws an Error that says what was
 * found. Pure: no DOM, no fetch (api.js fetches).
 */
const DTYPES = {'<f8': ['float64', 8], '<f4': ['float32', 4], '<i8': ['int64', 8]};

export function parseNpy(buf) {
  const u8 = new Uint8Array(buf);
  const magic = [0x93, 0x4e, 0x55, 0x4d, 0x50, 0x59]; /* \x93NUMPY */
  if (u8.length < 10 || magic.some((b, i) => u8[i] !== b)) throw new Error('not a .npy file (no \\x93NUMPY magic)');
  const major = u8[6];
  const dv = new DataView(buf);
  let hlen;
  let start;
  if (major === 1) { hlen = dv.getUint16(8, true); start = 10; }
  else if (major === 2 || major === 3) { hlen = dv.getUint32(8, true); start = 12; }
  else throw new Error(`.npy version ${major} is not read here`);
  if (start + hlen > u8.length) throw new Error('.npy header runs past the end of the file');
  const header = new TextDecoder('latin1').decode(u8.subarray(start, start + hlen));
  const descr = /'descr'\s*:\s*'([^']*)'/.exec(header);
  const fortran = /'fortran_order'\s*:\s*(True|False)/.exec(header);
  const shapeM = /'shape'\s*:\s*\(([^)]*)\)/.exec(header);
  if (!descr || !fortran || !shapeM) throw new Error(`.npy header not understood: ${header.trim()}`);
  const kind = DTYPES[descr[1]];
  if (!kind) throw new Error(`.npy dtype ${descr[1]} is not read here`);
  if (fortran[1] === 'True') throw new Error('.npy in Fortran order is not read here');
  const shape = shapeM[1].split(',').map((s) => s.trim()).filter((s) => s !== '').map(Number);
  if (shape.some((d) => !Number.isInteger(d) || d < 0)) throw new Error(`.npy shape (${shapeM[1]}) is not understood`);
  const count = shape.reduce((a, b) => a * b, 1);
  const [dtype, size] = kind;
  const off = start + hlen;
  if (off + count * size > u8.length) throw new Error(`.npy holds ${u8.length - off} data bytes, ${count * size} expected`);
  /* typed arrays need an aligned offset: copy the data when it is not */
  const body = off % size === 0 ? buf : buf.slice(off, off + count * size);
  const at = off % size === 0 ? off : 0;
  let data;
  if (dtype === 'float64') data = new Float64Array(body, at, count);
  else if (dtype === 'float32') data = new Float32Array(body, at, count);
  else {
    const big = new BigInt64Array(body, at, count);
    data = new Float64Array(count);
    for (let i = 0; i < count; i += 1) data[i] = Number(big[i]);
  }
  return {dtype, shape, data};
}
