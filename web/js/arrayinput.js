/* arrayinput.js — a form control for one "array value" of API.md.
 *
 * An array value is a number or nested JSON array, {"array": "a_…"} (an
 * uploaded array), {"range": {start, stop, step}} or {"random": {shape,
 * dist, low, high | mean, std, seed}}. arrayInput() shows a source selector and the
 * fields of the chosen source; "upload" sends a .npy, CSV or JSON file to
 * POST /v1/arrays and keeps the id it answers. get() builds the JSON value
 * from the fields without judging it: numbers that do not parse are sent as
 * typed, so the API's own error (naming the field) is what the user sees.
 * The only local error is JSON that does not parse in the "values" box.
 */
import {api} from './api.js';
import {h, clear, field, select, nextId, errorBox, fmtShape} from './dom.js';

const MODES = [['random', 'random'], ['range', 'range'], ['values', 'values (JSON)'], ['array', 'uploaded array']];

function num(s) {
  const t = String(s).trim();
  if (t === '') return undefined;
  const n = Number(t);
  return Number.isFinite(n) ? n : t;
}

function parseShape(s) {
  return String(s).split(/[\s,x×]+/).filter(Boolean).map((p) => num(p));
}

/* opts: {name, optional, value, path} — path is the API field path
 * ("params.inputs.x"), written on the control for error highlighting. */
export function arrayInput(opts) {
  const id = nextId('av');
  const modes = opts.optional ? [['none', 'none'], ...MODES] : MODES;
  const modeSel = select(modes, 'random', {id: id + '-mode', 'aria-label': `${opts.name}: source`});
  const body = h('div', {class: 'av-fields'});
  const status = h('div');
  const el = h('div', {class: 'av', dataset: {field: opts.path}}, field(`${opts.name} from`, modeSel), body, status);
  /* Changes made by code (mode switch, upload) are announced like typing,
   * so the form's live request preview hears them. */
  const fire = () => el.dispatchEvent(new Event('input', {bubbles: true}));

  const inputs = {
    shape: h('input', {type: 'text', value: '1000000', spellcheck: 'false', dataset: {field: opts.path + '.random.shape'}}),
    dist: select(['uniform', 'normal'], 'uniform'),
    low: h('input', {type: 'text', inputmode: 'decimal', value: '0'}),
    high: h('input', {type: 'text', inputmode: 'decimal', value: '1'}),
    mean: h('input', {type: 'text', inputmode: 'decimal', value: '0'}),
    std: h('input', {type: 'text', inputmode: 'decimal', value: '1'}),
    seed: h('input', {type: 'text', inputmode: 'numeric', value: '42'}),
    start: h('input', {type: 'text', inputmode: 'decimal', value: '0'}),
    stop: h('input', {type: 'text', inputmode: 'decimal', value: '1000000'}),
    step: h('input', {type: 'text', inputmode: 'decimal', value: '1'}),
    values: h('textarea', {rows: '3', spellcheck: 'false', dataset: {field: opts.path}}, ''),
    array: h('input', {type: 'text', placeholder: 'a_…', spellcheck: 'false', dataset: {field: opts.path + '.array'}}),
    file: h('input', {type: 'file', accept: '.npy,.csv,.json,application/x-npy,text/csv,application/json'}),
  };
  inputs.values.value = '[1, 2, 3]';

  function render() {
    clear(body);
    const m = modeSel.value;
    const n = opts.name;
    if (m === 'random') {
      body.append(field('shape', inputs.shape, 'e.g. 1000000 or 100, 10000'), field('distribution', inputs.dist));
      if (inputs.dist.value === 'uniform') body.append(field('low', inputs.low), field('high', inputs.high));
      else body.append(field('mean', inputs.mean), field('std', inputs.std));
      body.append(field('seed', inputs.seed));
    } else if (m === 'range') {
      body.append(field('start', inputs.start), field('stop', inputs.stop), field('step', inputs.step));
    } else if (m === 'values') {
      body.append(h('div', {class: 'span-all', style: 'grid-column:1/-1'},
        field(`${n} values`, inputs.values, 'a number or a nested JSON array, e.g. [[1, 2], [3, 4]]')));
    } else if (m === 'array') {
      body.append(field('array id', inputs.array), field('or upload .npy / CSV / JSON', inputs.file));
    }
    for (const c of body.querySelectorAll('input, select, textarea')) {
      const lab = body.querySelector(`label[for="${c.id}"]`);
      if (lab && !lab.textContent.startsWith(n)) c.setAttribute('aria-label', `${n}: ${lab.textContent}`);
    }
  }

  modeSel.addEventListener('change', () => { render(); fire(); });
  inputs.dist.addEventListener('change', () => { render(); fire(); });
  inputs.file.addEventListener('change', () => upload());

  async function upload() {
    const f = inputs.file.files && inputs.file.files[0];
    if (!f) return;
    clear(status);
    const lower = f.name.toLowerCase();
    const type = lower.endsWith('.npy') ? 'application/x-npy' : lower.endsWith('.csv') ? 'text/csv'
      : lower.endsWith('.json') ? 'application/json' : (f.type || 'application/octet-stream');
    status.append(h('p', {class: 'muted', role: 'status'}, `Uploading ${f.name}…`));
    try {
      const a = await api.post('/v1/arrays', f, {headers: {'Content-Type': type}});
      inputs.array.value = a.id;
      clear(status);
      status.append(h('p', {class: 'muted', role: 'status'}, `Uploaded ${f.name}: ${a.id}, ${a.dtype}, ${fmtShape(a.shape)}`));
      fire();
    } catch (e) {
      clear(status);
      status.append(errorBox(e));
    }
  }

  function get() {
    const m = modeSel.value;
    if (m === 'none') return undefined;
    if (m === 'random') {
      const r = {shape: parseShape(inputs.shape.value), dist: inputs.dist.value};
      const keys = r.dist === 'uniform' ? ['low', 'high'] : ['mean', 'std'];
      for (const k of keys) { const v = num(inputs[k].value); if (v !== undefined) r[k] = v; }
      const seed = num(inputs.seed.value);
      if (seed !== undefined) r.seed = seed;
      return {random: r};
    }
    if (m === 'range') {
      const r = {start: num(inputs.start.value), stop: num(inputs.stop.value), step: num(inputs.step.value)};
      for (const k of Object.keys(r)) if (r[k] === undefined) delete r[k];
      return {range: r};
    }
    if (m === 'array') return {array: inputs.array.value.trim()};
    try {
      return JSON.parse(inputs.values.value);
    } catch (e) {
      const err = new Error(`${opts.name}: the values are not valid JSON (${e.message})`);
      err.control = inputs.values;
      throw err;
    }
  }

  function set(v) {
    if (v === undefined || v === null) {
      modeSel.value = opts.optional ? 'none' : 'random';
    } else if (typeof v === 'object' && !Array.isArray(v) && v.random) {
      const r = v.random;
      modeSel.value = 'random';
      inputs.shape.value = (r.shape || []).join(', ');
      inputs.dist.value = r.dist || 'uniform';
      inputs.low.value = r.low ?? 0;
      inputs.high.value = r.high ?? 1;
      inputs.mean.value = r.mean ?? 0;
      inputs.std.value = r.std ?? 1;
      inputs.seed.value = r.seed ?? '';
    } else if (typeof v === 'object' && !Array.isArray(v) && v.range) {
      modeSel.value = 'range';
      inputs.start.value = v.range.start ?? 0;
      inputs.stop.value = v.range.stop ?? '';
      inputs.step.value = v.range.step ?? 1;
    } else if (typeof v === 'object' && !Array.isArray(v) && v.array) {
      modeSel.value = 'array';
      inputs.array.value = v.array;
    } else {
      modeSel.value = 'values';
      inputs.values.value = JSON.stringify(v);
    }
    render();
  }

  set(opts.value);
  return {el, get, set};
}
