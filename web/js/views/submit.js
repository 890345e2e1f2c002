/* submit.js — the Submit page: a form for each job kind, presets from the
 * seeds, a backend choice that includes compare, and the request it will
 * send shown live as JSON and as a curl command.
 *
 * The form builds exactly the body of POST /v1/jobs (API.md) and sends it;
 * on 202 it opens the job's page. On an error the API's error is shown as
 * given (code, message, field, position; a caret under the expression for
 * params.expr) and the control named by error.field is marked aria-invalid
 * and focused. #/submit?preset=<id> loads a preset; #/submit?from=<job id>
 * loads a recorded job's params ("run again"). When GET /v1/devices says
 * there is no usable GPU, the cuda backend is disabled with the reason
 * written beside it (a job asking for it would only get a 503). A geodesic
 * job takes an optional params.query (knn, radius, rowwise) with its fields;
 * the matrix's layout is neither shown nor sent with one.
 */
import {api, jobsApi, getToken} from '../api.js';
import {h, clear, field, select, nextId, errorBox, announce, KINDS} from '../dom.js';
import {arrayInput} from '../arrayinput.js';
import {PRESETS, presetById} from '../presets.js';

const BACKEND_NOTES = {auto: 'the fastest by estimate', serial: 'one CPU thread', cpu: 'the thread pool',
  cuda: 'a GPU', compare: 'every backend, checked'};
// The language's functions (api/API.md "map"); NumPy's names are accepted too.
const FUNCS = 'abs sqrt cbrt exp exp2 expm1 log log2 log10 log1p sin cos tan asin acos atan atan2 sinh cosh tanh ' +
  'asinh acosh atanh floor ceil round trunc min max pow hypot fmod fma where sign isnan isinf isfinite signbit ' +
  'copysign nextafter ones_like (or NumPy\'s arcsin arccos arctan arctan2 arcsinh arccosh arctanh minimum maximum ' +
  'absolute power rint remainder floor_divide copy conj)';

function segmented(name, options, value, legend) {
  const g = h('div', {class: 'seg', role: 'radiogroup', 'aria-label': legend});
  for (const [v, text, note] of options) {
    const id = nextId(name);
    g.append(h('input', {type: 'radio', name, id, value: v, checked: v === value}),
      h('label', {for: id}, text, note ? h('span', {class: 'note'}, note) : null));
  }
  return g;
}
const radioValue = (root, name) => (root.querySelector(`input[name="${name}"]:checked`) || {}).value;
function setRadio(root, name, v) {
  const r = root.querySelector(`input[name="${name}"][value="${v}"]`);
  if (r) r.checked = true;
}

function num(s) {
  const t = String(s).trim();
  if (t === '') return undefined;
  const n = Number(t);
  return Number.isFinite(n) ? n : t;
}

/* Named inputs of map/reduce: rows of name + array value. */
function inputsEditor(kind) {
  const list = h('div');
  const rowsEl = [];
  const addBtn = h('button', {type: 'button', class: 'btn btn-sm'}, '+ Add input');
  const el = h('fieldset', null, h('legend', {class: 'legend'}, 'Inputs'), list, addBtn);
  function add(name, value) {
    const nameIn = h('input', {type: 'text', value: name, spellcheck: 'false', 'aria-label': 'input name',
      dataset: {field: 'params.inputs'}});
    const av = arrayInput({name: name || 'input', value, path: `params.inputs.${name}`});
    const rm = h('button', {type: 'button', class: 'btn btn-sm btn-ghost', 'aria-label': `Remove input ${name}`}, 'Remove');
    const modeField = av.el.firstChild; /* the source selector, moved beside the name */
    const row = h('div', {class: 'input-row'}, field('name', nameIn), modeField, h('div'), rm,
      h('div', {style: 'grid-column:1/-1'}, av.el));
    nameIn.addEventListener('input', () => { av.el.dataset.field = `params.inputs.${nameIn.value.trim()}`; });
    const entry = {row, nameIn, av};
    rm.addEventListener('click', () => {
      rowsEl.splice(rowsEl.indexOf(entry), 1); row.remove(); el.dispatchEvent(new Event('input', {bubbles: true}));
      addBtn.focus();
    });
    rowsEl.push(entry);
    list.append(row);
  }
  addBtn.addEventListener('click', () => {
    const used = new Set(rowsEl.map((r) => r.nameIn.value.trim()));
    const name = ['x', 'y', 'z', 'a', 'b', 'c', 'w', 'u', 'v'].find((n) => !used.has(n)) || `in${rowsEl.length}`;
    add(name, {random: {shape: [1000000], dist: 'uniform', low: 0, high: 1, seed: rowsEl.length + 1}});
    rowsEl[rowsEl.length - 1].nameIn.focus();
    el.dispatchEvent(new Event('input', {bubbles: true}));
  });
  return {
    el,
    get() {
      const o = {};
      for (const r of rowsEl) o[r.nameIn.value.trim()] = r.av.get();
      return o;
    },
    set(inputs) {
      rowsEl.splice(0).forEach((r) => r.row.remove());
      for (const [k, v] of Object.entries(inputs || {})) add(k, v);
      if (!rowsEl.length) add('x', undefined);
    },
    kind,
  };
}

/* map, reduce and matmul: without params.dtype the API takes NumPy's
 * promotion of the inputs (API.md, "Result dtypes"), so the form's default
 * sends none rather than forcing float64 onto float32 inputs. */
const AUTO_DTYPES = [['', 'auto (from the inputs, as NumPy)'], 'float64', 'float32'];
function withDtype(p, sel) {
  if (sel.value) p.dtype = sel.value;
  return p;
}

function exprInput() {
  return h('input', {type: 'text', class: 'mono', spellcheck: 'false', autocomplete: 'off', value: 'x**2',
    dataset: {field: 'params.expr'}});
}

function mapSection() {
  const expr = exprInput();
  const inputs = inputsEditor('map');
  const dtype = select(AUTO_DTYPES, '', {dataset: {field: 'params.dtype'}});
  const el = h('div', {class: 'stack'},
    field('Expression', expr, `Names of the inputs, + - * / // % **, comparisons, and or not, ${FUNCS}, pi, e.`),
    inputs.el, field('dtype', dtype));
  return {el, expr,
    get: () => withDtype({expr: expr.value, inputs: inputs.get()}, dtype),
    set(p) { expr.value = p.expr ?? ''; inputs.set(p.inputs); dtype.value = p.dtype || ''; }};
}

function reduceSection() {
  const op = select(['sum', 'mean', 'min', 'max', 'prod', 'var', 'std', 'argmin', 'argmax', 'norm'], 'sum',
    {dataset: {field: 'params.op'}});
  const expr = exprInput();
  const inputs = inputsEditor('reduce');
  const axis = h('input', {type: 'text', inputmode: 'numeric', placeholder: 'all', dataset: {field: 'params.axis'}});
  const ddof = h('input', {type: 'text', inputmode: 'numeric', value: '0', dataset: {field: 'params.ddof'}});
  const dtype = select(AUTO_DTYPES, '', {dataset: {field: 'params.dtype'}});
  const ddofField = field('ddof', ddof, 'delta degrees of freedom of var and std');
  const sync = () => { ddofField.hidden = !['var', 'std'].includes(op.value); };
  op.addEventListener('change', sync);
  const el = h('div', {class: 'stack'},
    h('div', {class: 'grid grid-3'}, field('Operation', op), field('Axis', axis, 'blank: reduce everything to one number'),
      ddofField),
    field('Expression (applied before reducing)', expr, `Names of the inputs and ${FUNCS}.`), inputs.el,
    field('dtype', dtype));
  sync();
  return {el, expr,
    get() {
      const p = withDtype({op: op.value, expr: expr.value, inputs: inputs.get(),
        axis: axis.value.trim() === '' ? null : num(axis.value)}, dtype);
      if (!ddofField.hidden) p.ddof = num(ddof.value);
      return p;
    },
    set(p) {
      op.value = p.op || 'sum'; expr.value = p.expr ?? 'x'; inputs.set(p.inputs); axis.value = p.axis ?? '';
      ddof.value = p.ddof ?? 0; dtype.value = p.dtype || ''; sync();
    }};
}

function matmulSection() {
  const a = arrayInput({name: 'a', path: 'params.a', value: {random: {shape: [1000, 1000], dist: 'normal', seed: 1}}});
  const b = arrayInput({name: 'b', path: 'params.b', value: {random: {shape: [1000, 1000], dist: 'normal', seed: 2}}});
  const bias = arrayInput({name: 'bias', path: 'params.bias', optional: true});
  const ta = h('input', {type: 'checkbox', id: nextId('ta')});
  const tb = h('input', {type: 'checkbox', id: nextId('tb')});
  const dtype = select(AUTO_DTYPES, '', {dataset: {field: 'params.dtype'}});
  const el = h('div', {class: 'stack'}, h('p', {class: 'muted'}, 'a @ b + bias, bias broadcast (the seeds’ y = W·x + b).'),
    h('fieldset', null, h('legend', {class: 'legend'}, 'a'), a.el),
    h('fieldset', null, h('legend', {class: 'legend'}, 'b'), b.el),
    h('fieldset', null, h('legend', {class: 'legend'}, 'bias (optional)'), bias.el),
    h('div', {class: 'row'}, h('label', {for: ta.id}, ta, ' transpose a'), h('label', {for: tb.id}, tb, ' transpose b')),
    field('dtype', dtype));
  return {el,
    get() {
      const p = withDtype({a: a.get(), b: b.get(), transpose_a: ta.checked, transpose_b: tb.checked}, dtype);
      const bi = bias.get();
      if (bi !== undefined) p.bias = bi;
      return p;
    },
    set(p) {
      a.set(p.a); b.set(p.b); bias.set(p.bias); ta.checked = !!p.transpose_a; tb.checked = !!p.transpose_b;
      dtype.value = p.dtype || '';
    }};
}

/* params.query of a geodesic job: none (the matrix), knn, radius or
 * rowwise, each with its own fields; the matrix's layout only without one
 * (the API refuses layout with a query). */
function queryEditor() {
  const kind = select([['', 'none: the distance matrix'], ['knn', 'knn: the k nearest of each point'],
    ['radius', 'radius: every pair within r'], ['rowwise', 'rowwise: one value per point']], '',
  {dataset: {field: 'params.query'}});
  const k = h('input', {type: 'number', min: '1', max: '1024', step: '1', value: '10', dataset: {field: 'params.query.knn.k'}});
  const r = h('input', {type: 'text', inputmode: 'decimal', value: '5', dataset: {field: 'params.query.radius.r'}});
  const maxPairs = h('input', {type: 'text', inputmode: 'numeric', placeholder: 'the service’s default',
    dataset: {field: 'params.query.radius.max_pairs'}});
  const op = select(['min', 'argmin', 'max', 'argmax', 'mean', 'sum', 'count'], 'min', {dataset: {field: 'params.query.rowwise.op'}});
  const within = h('input', {type: 'text', inputmode: 'decimal', placeholder: 'every candidate',
    dataset: {field: 'params.query.rowwise.within'}});
  const parts = {
    knn: h('div', {class: 'grid grid-3'}, field('k', k, '1 … 1024 neighbours per point')),
    radius: h('div', {class: 'grid grid-3'}, field('r (in the units)', r, 'pairs with distance ≤ r'),
      field('max_pairs (optional)', maxPairs, 'the job fails when it finds more')),
    rowwise: h('div', {class: 'grid grid-3'}, field('Operation', op),
      field('within (optional)', within, 'only candidates at distance ≤ within')),
  };
  const el = h('div', {class: 'stack'}, field('Query', kind, 'a question about the distances instead of the n × m matrix'),
    parts.knn, parts.radius, parts.rowwise);
  const sync = () => { for (const [name, p] of Object.entries(parts)) p.hidden = kind.value !== name; };
  kind.addEventListener('change', sync);
  sync();
  return {el, kind, sync,
    get() {
      if (kind.value === 'knn') return {knn: {k: num(k.value)}};
      if (kind.value === 'radius') {
        const q = {r: num(r.value)};
        if (num(maxPairs.value) !== undefined) q.max_pairs = num(maxPairs.value);
        return {radius: q};
      }
      if (kind.value === 'rowwise') {
        const q = {op: op.value};
        if (num(within.value) !== undefined) q.within = num(within.value);
        return {rowwise: q};
      }
      return undefined;
    },
    set(q) {
      const name = q && typeof q === 'object' ? Object.keys(q)[0] : '';
      kind.value = parts[name] ? name : '';
      const v = (q && q[name]) || {};
      if (name === 'knn') k.value = v.k ?? 10;
      if (name === 'radius') { r.value = v.r ?? ''; maxPairs.value = v.max_pairs ?? ''; }
      if (name === 'rowwise') { op.value = v.op || 'min'; within.value = v.within ?? ''; }
      sync();
    }};
}

function geodesicSection() {
  const points = arrayInput({name: 'points', path: 'params.points',
    value: {random: {shape: [2000, 2], dist: 'uniform', low: -90, high: 90, seed: 7}}});
  const targets = arrayInput({name: 'targets', path: 'params.targets', optional: true});
  const method = select(['karney', 'vincenty', 'haversine'], 'karney', {dataset: {field: 'params.method'}});
  const ell = select(['WGS84', 'GRS80', ['custom', 'custom (a, f)']], 'WGS84', {dataset: {field: 'params.ellipsoid'}});
  const ea = h('input', {type: 'text', inputmode: 'decimal', value: '6378137'});
  const ef = h('input', {type: 'text', inputmode: 'decimal', value: '0.0033528106647474805'});
  const radius = h('input', {type: 'text', inputmode: 'decimal', value: '6371008.8', dataset: {field: 'params.radius_m'}});
  const units = select(['m', 'km'], 'km', {dataset: {field: 'params.units'}});
  const layout = select(['square', 'condensed'], 'square', {dataset: {field: 'params.layout'}});
  const dtype = select(['float64', 'float32'], 'float64', {dataset: {field: 'params.dtype'}});
  const query = queryEditor();
  const custom = h('div', {class: 'grid grid-2'}, field('semi-major axis a (m)', ea), field('flattening f', ef));
  const radiusField = field('sphere radius (m)', radius);
  const layoutField = field('Layout', layout, 'condensed: SciPy pdist order');
  const sync = () => {
    custom.hidden = ell.value !== 'custom'; radiusField.hidden = method.value !== 'haversine';
    layoutField.hidden = query.kind.value !== '';
  };
  ell.addEventListener('change', sync);
  method.addEventListener('change', sync);
  query.kind.addEventListener('change', sync);
  const el = h('div', {class: 'stack'},
    h('fieldset', null, h('legend', {class: 'legend'}, 'points (n × 2: lat, lon in degrees)'), points.el),
    h('fieldset', null, h('legend', {class: 'legend'}, 'targets (optional, m × 2)'), targets.el),
    h('div', {class: 'grid grid-3'}, field('Method', method), field('Ellipsoid', ell), radiusField),
    custom,
    h('div', {class: 'grid grid-3'}, field('Units', units), layoutField, field('dtype', dtype)),
    h('fieldset', null, h('legend', {class: 'legend'}, 'Query (optional)'), query.el));
  sync();
  return {el,
    get() {
      const p = {points: points.get(), method: method.value, units: units.value, dtype: dtype.value};
      const q = query.get();
      if (q) p.query = q; else p.layout = layout.value;
      const t = targets.get();
      if (t !== undefined) p.targets = t;
      p.ellipsoid = ell.value === 'custom' ? {a: num(ea.value), f: num(ef.value)} : ell.value;
      if (method.value === 'haversine') p.radius_m = num(radius.value);
      return p;
    },
    set(p) {
      points.set(p.points); targets.set(p.targets); method.value = p.method || 'karney';
      if (p.ellipsoid && typeof p.ellipsoid === 'object') { ell.value = 'custom'; ea.value = p.ellipsoid.a; ef.value = p.ellipsoid.f; }
      else ell.value = p.ellipsoid || 'WGS84';
      if (p.radius_m !== undefined) radius.value = p.radius_m;
      units.value = p.units || 'm'; layout.value = p.layout || 'square'; dtype.value = p.dtype || 'float64';
      query.set(p.query);
      sync();
    }};
}

export function mount(root, {query}) {
  const sections = {map: mapSection(), reduce: reduceSection(), matmul: matmulSection(), geodesic: geodesicSection()};
  const kindSeg = segmented('kind', KINDS.map((k) => [k, k]), 'map', 'Kind');
  const backendSeg = segmented('backend', ['auto', 'serial', 'cpu', 'cuda', 'compare'].map((b) => [b, b]), 'auto', 'Backend');
  const backendHint = h('p', {class: 'hint', id: nextId('bh')});
  const label = h('input', {type: 'text', maxlength: '200', dataset: {field: 'label'}});
  const priority = h('input', {type: 'number', min: '0', max: '9', value: '5', dataset: {field: 'priority'}});
  const timeout = h('input', {type: 'number', min: '1', placeholder: '600', dataset: {field: 'timeout_s'}});
  const errArea = h('div', {id: 'submit-error'});
  const submitBtn = h('button', {type: 'submit', class: 'btn btn-primary'}, 'Submit job');
  const preview = h('pre', {class: 'json', id: 'request-json', tabindex: '0', 'aria-label': 'Request body'});
  const curl = h('pre', {class: 'json', tabindex: '0', 'aria-label': 'The same request with curl'});
  const copyBtn = h('button', {type: 'button', class: 'btn btn-sm'}, 'Copy curl');
  const paramsHost = h('div');
  const presetBtns = PRESETS.map((p) => h('button', {type: 'button', class: 'preset', 'aria-pressed': 'false',
    dataset: {preset: p.id}, onclick: () => loadPreset(p)}, h('span', {class: 't'}, p.title), h('span', {class: 'd'}, p.text)));

  const form = h('form', {class: 'form-grid', novalidate: true, 'aria-label': 'New job'},
    h('div', {class: 'stack'},
      h('fieldset', null, h('legend', {class: 'legend'}, 'Kind'), kindSeg),
      h('fieldset', null, h('legend', {class: 'legend'}, 'Parameters'), paramsHost),
      h('fieldset', null, h('legend', {class: 'legend'}, 'Backend'), backendSeg, backendHint),
      h('fieldset', null, h('legend', {class: 'legend'}, 'Options'),
        h('div', {class: 'grid grid-3'}, field('Label', label, 'free text, up to 200 characters'),
          field('Priority', priority, 'higher runs first'), field('Timeout (s)', timeout))),
      errArea,
      h('div', {class: 'row end'}, submitBtn)),
    h('aside', {class: 'sticky'},
      h('section', {class: 'card', 'aria-label': 'Request preview'},
        h('h2', {class: 'card-title'}, 'Request'), h('p', {class: 'muted'}, 'POST /v1/jobs with this body:'), preview,
        h('h3', null, 'With curl'), curl, h('div', {class: 'row end', style: 'margin-top:8px'}, copyBtn))));

  root.append(h('div', {class: 'page-head'}, h('h1', null, 'Submit a job')),
    h('section', {class: 'card', 'aria-labelledby': 'presets-title', style: 'margin-bottom:16px'},
      h('h2', {class: 'card-title', id: 'presets-title'}, 'Start from an example (the seeds)'),
      h('div', {class: 'presets'}, presetBtns)),
    form);

  function kind() { return radioValue(kindSeg, 'kind'); }
  function showKind() {
    clear(paramsHost);
    paramsHost.append(sections[kind()].el);
  }

  function build() {
    const k = kind();
    const body = {kind: k, backend: radioValue(backendSeg, 'backend'), params: sections[k].get()};
    if (label.value.trim()) body.label = label.value.trim();
    const pr = num(priority.value);
    if (pr !== undefined) body.priority = pr;
    const to = num(timeout.value);
    if (to !== undefined) body.timeout_s = to;
    return body;
  }

  function updatePreview() {
    try {
      const body = build();
      const json = JSON.stringify(body, null, 2);
      preview.textContent = json;
      const auth = getToken() ? " \\\n  -H 'Authorization: Bearer $TESSEL_TOKEN'" : '';
      curl.textContent = `curl -sS -X POST ${location.origin}/v1/jobs${auth} \\\n  -H 'Content-Type: application/json' \\\n` +
        `  -d '${JSON.stringify(body).replace(/'/g, "'\\''")}'`;
    } catch (e) {
      preview.textContent = e.message;
    }
  }

  function load(body) {
    setRadio(kindSeg, 'kind', KINDS.includes(body.kind) ? body.kind : 'map');
    showKind();
    if (body.params) sections[kind()].set(body.params);
    setRadio(backendSeg, 'backend', body.backend || 'auto');
    disableCuda();
    label.value = body.label || '';
    priority.value = body.priority ?? 5;
    timeout.value = body.timeout_s ?? '';
    clearErrors();
    updatePreview();
  }

  function loadPreset(p) {
    for (const b of presetBtns) b.setAttribute('aria-pressed', String(b.dataset.preset === p.id));
    load(structuredClone(p.body));
    announce(`Loaded the example: ${p.title}`);
  }

  function clearErrors() {
    clear(errArea);
    for (const el of form.querySelectorAll('[aria-invalid]')) el.removeAttribute('aria-invalid');
  }

  function markField(err) {
    if (!err.field) return null;
    let path = err.field;
    while (path) {
      const el = [...form.querySelectorAll('[data-field]')].find((c) => c.dataset.field === path && !c.closest('[hidden]'));
      if (el) {
        const ctl = el.matches('input, select, textarea') ? el : el.querySelector('input, select, textarea');
        if (ctl) return ctl;
      }
      const i = path.lastIndexOf('.');
      path = i > 0 ? path.slice(0, i) : '';
    }
    return null;
  }

  async function onSubmit(e) {
    e.preventDefault();
    clearErrors();
    let body;
    try { body = build(); } catch (err) {
      errArea.append(errorBox({code: 'form', message: err.message}));
      if (err.control) { err.control.setAttribute('aria-invalid', 'true'); err.control.focus(); }
      return;
    }
    submitBtn.disabled = true;
    submitBtn.textContent = 'Submitting…';
    try {
      const job = await jobsApi.submit(body);
      announce(`Submitted job ${job.id}`);
      location.hash = `#/jobs/${encodeURIComponent(job.id)}`;
    } catch (err) {
      const ctl = markField(err);
      const src = err.field === 'params.expr' ? body.params.expr : undefined;
      errArea.append(errorBox(err, src));
      if (ctl) {
        ctl.setAttribute('aria-invalid', 'true');
        ctl.setAttribute('aria-errormessage', 'submit-error');
        ctl.focus();
        if (Number.isInteger(err.position) && ctl.setSelectionRange) {
          try { ctl.setSelectionRange(err.position, err.position + 1); } catch { /* not a text control */ }
        }
      } else {
        errArea.querySelector('.error-box').setAttribute('tabindex', '-1');
        errArea.querySelector('.error-box').focus();
      }
    } finally {
      submitBtn.disabled = false;
      submitBtn.textContent = 'Submit job';
    }
  }

  form.addEventListener('submit', onSubmit);
  form.addEventListener('input', updatePreview);
  form.addEventListener('change', updatePreview);
  kindSeg.addEventListener('change', () => { showKind(); clearErrors(); updatePreview(); });
  copyBtn.addEventListener('click', async () => {
    try { await navigator.clipboard.writeText(curl.textContent); announce('Copied'); copyBtn.textContent = 'Copied ✓'; } catch {
      const r = document.createRange(); r.selectNodeContents(curl);
      const s = getSelection(); s.removeAllRanges(); s.addRange(r);
    }
  });

  let alive = true;
  let noGpu = null; /* the reason, once /v1/devices said there is no GPU */
  function disableCuda() {
    const r = backendSeg.querySelector('input[value="cuda"]');
    if (!r || noGpu === null) return;
    r.disabled = true;
    r.setAttribute('aria-describedby', backendHint.id);
    const lab = backendSeg.querySelector(`label[for="${r.id}"]`);
    if (lab && !lab.querySelector('.note')) lab.append(h('span', {class: 'note'}, 'no GPU'));
    if (r.checked) {
      setRadio(backendSeg, 'backend', 'auto');
      updatePreview();
      announce('No GPU here: backend auto chosen instead of cuda');
    }
  }
  backendSeg.addEventListener('change', disableCuda);
  api.get('/v1/devices').then((d) => {
    if (!alive) return;
    const cuda = d.cuda || {};
    const gpu = cuda.available && (cuda.devices || []).length > 0;
    if (!gpu) { noGpu = cuda.reason || 'CUDA unavailable'; disableCuda(); }
    backendHint.textContent = gpu
      ? `GPU: ${(cuda.devices || []).map((g) => g.name).join(', ')}. ` + Object.entries(BACKEND_NOTES).map(([k, v]) => `${k}: ${v}`).join(' · ')
      : `cuda cannot be chosen: no GPU here (${noGpu}). compare runs serial and cpu.`;
  }).catch(() => { backendHint.textContent = Object.entries(BACKEND_NOTES).map(([k, v]) => `${k}: ${v}`).join(' · '); });

  showKind();
  for (const s of Object.values(sections)) {
    if (s === sections.map) s.set({expr: 'x**2', inputs: {x: {range: {start: 0, stop: 1000000, step: 1}}}});
    if (s === sections.reduce) s.set({op: 'sum', expr: 'x**2', inputs: {x: {random: {shape: [100, 10000], dist: 'uniform', low: 0, high: 1, seed: 3}}}, axis: 1});
  }
  if (query.preset && presetById(query.preset)) {
    loadPreset(presetById(query.preset));
  } else if (query.from) {
    jobsApi.get(query.from).then((j) => {
      if (!alive) return;
      if (!j.params) { errArea.append(errorBox({code: 'no_params', message: `job ${j.id} does not carry its params`})); return; }
      load({kind: j.kind, backend: (j.backend || {}).requested, label: j.label, priority: j.priority, params: j.params});
    }).catch((err) => errArea.append(errorBox(err)));
  }
  updatePreview();
  return () => { alive = false; };
}
