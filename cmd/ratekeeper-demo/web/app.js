// The demo page: polls GET /state for the live level, sends POST /test
// for requests and scenarios, and POST /config from the policy form.
'use strict';

const POLL_MS = 200;
const WINDOW_MS = 30000; // the timeline's span
const HEADERS = ['RateLimit-Policy', 'RateLimit', 'X-RateLimit-Limit', 'X-RateLimit-Remaining', 'X-RateLimit-Reset', 'Retry-After'];
const STATUS_TEXT = { 200: 'OK', 400: 'Bad Request', 429: 'Too Many Requests', 503: 'Service Unavailable' };

// ALGORITHMS is the server's table of algorithms (GET /algorithms), by
// name: their labels, help, and fields with their hints and defaults.
const ALGORITHMS = {};

const $ = (id) => document.getElementById(id);

const ui = {
  backend: $('backend'), gauge: $('gauge'), fill: $('gauge-fill'), level: $('level'), limit: $('limit'), unit: $('unit'),
  next: $('next'), full: $('full'), counts: $('counts'), submit: $('submit'), result: $('result'),
  canvas: $('timeline'), statusLine: $('status-line'), headers: $('headers'),
  summary: $('summary'), current: $('current'), form: $('config-form'), algorithm: $('algorithm'),
  algorithmHelp: $('algorithm-help'), configError: $('config-error'), configStatus: $('config-status'),
  burstForm: $('burst-form'), burstN: $('burst-n'), burst: $('burst'),
  steadyForm: $('steady-form'), steadyR: $('steady-r'), steadyS: $('steady-s'), steady: $('steady'),
  jobForm: $('job-form'), jobCost: $('job-cost'), job: $('job'),
  scenarioResult: $('scenario-result'), reset: $('reset'), live: $('live'),
  leases: $('leases'), leasesHelp: $('leases-help'), calls: $('calls'),
  calendarField: $('calendar-field'), calendar: $('calendar'), time_zone: $('time_zone'),
};

const LEASES_HELP = 'Decide the key in process from leases taken from the store, a call per lease instead of per request, within the same bound.';

const state = {
  config: null,      // the server's current configuration
  limit: 1,
  samples: [],       // {t, remaining, limit}: the level over time
  requests: [],      // {t, allowed}
  marks: [],         // {t, label}: resets and policy changes
  allowed: 0,
  denied: 0,
  failed: 0,         // requests the server could not decide
  store: null,       // 'up', 'down' (the server answers, its store not) or 'offline'

  seq: 0,            // responses to POST /test shown so far
  steadyRun: null,   // the running steady scenario, to stop it
};

const now = () => performance.now();

function fmtNumber(x) {
  if (typeof x !== 'number' || !isFinite(x)) return '–';
  return Number.isInteger(x) ? String(x) : x.toFixed(2);
}

function fmtMs(ms) {
  if (ms <= 0) return 'now';
  if (ms < 1000) return `in ${Math.ceil(ms)} ms`;
  return `in ${(ms / 1000).toFixed(1)} s`;
}

function plural(n, word) {
  return `${n} ${word}${n === 1 ? '' : 's'}`;
}

// The level.

function showLevel(remaining, limit, retryMs, resetMs) {
  state.limit = limit;
  ui.gauge.classList.remove('stale');
  const share = limit > 0 ? Math.max(0, Math.min(1, remaining / limit)) : 0;
  ui.fill.style.width = `${(share * 100).toFixed(2)}%`;
  ui.gauge.classList.toggle('empty', remaining < 1);
  ui.gauge.classList.toggle('debt', remaining < 0);
  ui.level.classList.toggle('debt', remaining < 0);
  ui.gauge.classList.toggle('notched', limit <= 40);
  ui.gauge.style.setProperty('--ticks', String(Math.max(1, limit)));
  ui.gauge.setAttribute('aria-valuemax', String(limit));
  ui.gauge.setAttribute('aria-valuenow', String(remaining));
  ui.gauge.setAttribute('aria-valuetext', `${fmtNumber(remaining)} of ${limit} left`);
  ui.level.textContent = fmtNumber(remaining);
  ui.level.dataset.remaining = String(remaining);
  ui.limit.textContent = String(limit);
  if (retryMs !== undefined) ui.next.textContent = retryMs > 0 ? `allowed ${fmtMs(retryMs)}` : 'allowed now';
  if (resetMs !== undefined) ui.full.textContent = resetMs > 0 ? fmtMs(resetMs) : 'full now';
  state.samples.push({ t: now(), remaining, limit });
}

// showBackend says where the limits live, or what is down: the store
// (the server answers /state without a level) or the server itself (s is
// null).
function showBackend(s) {
  ui.backend.classList.remove('redis', 'memory', 'down');
  let store, text, cls;
  if (!s) {
    [store, text, cls] = ['offline', 'The demo server is not answering: is it running?', 'down'];
  } else if (!s.store_ok) {
    store = 'down';
    cls = 'down';
    text = s.backend === 'redis'
      ? `Redis at ${s.redis_addr} is down: requests fail until it is back`
      : 'The in-process store failed: requests fail';
  } else if (s.backend === 'redis') {
    [store, text, cls] = ['up', `Redis at ${s.redis_addr}: limits shared across servers`, 'redis'];
  } else {
    [store, text, cls] = ['up', 'in-process store: set REDIS_URL to share limits across servers', 'memory'];
  }
  ui.backend.textContent = text;
  ui.backend.classList.add(cls);
  ui.live.classList.toggle('down', store !== 'up');
  ui.live.textContent = { up: 'live', down: s && s.backend === 'redis' ? 'Redis down' : 'store down', offline: 'offline' }[store];
  document.body.dataset.store = store;
  if (store !== state.store && (state.store !== null || store !== 'up')) {
    mark(store === 'up' ? 'back' : store === 'down' && s.backend === 'redis' ? 'Redis down' : store);
  }
  if (store !== 'up') {
    // No level to show: grey the gauge, and break the line on the chart.
    ui.gauge.classList.add('stale');
    ui.level.textContent = '–';
    ui.level.dataset.remaining = '';
    ui.next.textContent = '–';
    ui.full.textContent = '–';
    state.samples.push({ t: now(), gap: true });
  }
  state.store = store;
}

async function poll() {
  let resp, s;
  try {
    resp = await fetch('/state', { cache: 'no-store' });
    s = await resp.json();
  } catch {
    showBackend(null);
    return;
  }
  if (!s.config) { // not the demo's /state: a proxy's error page, say
    showBackend(null);
    return;
  }
  showBackend(s);
  showConfig(s.config, false);
  if (s.store_calls >= 0) {
    ui.calls.textContent = `${plural(s.store_calls, 'call')} for ${plural(s.decisions, 'decision')}`;
  }
  if (s.store_ok) showLevel(s.remaining, s.limit, s.retry_after_ms, s.reset_after_ms);
  document.body.dataset.ready = 'true';
}

async function pollLoop() {
  for (;;) {
    const started = now();
    if (!document.hidden) await poll();
    await sleep(Math.max(0, POLL_MS - (now() - started)));
  }
}

function sleep(ms) {
  return new Promise((resolve) => setTimeout(resolve, ms));
}

// Requests.

// send makes one POST /test and records it; it returns the outcome.
async function send() {
  let resp, body;
  try {
    resp = await fetch('/test', { method: 'POST' });
    body = await resp.json();
  } catch {
    state.failed++;
    showCounts();
    showResult({ error: 'The demo server did not answer.' });
    return 'error';
  }
  showHeaders(resp);
  if (resp.status !== 200 && resp.status !== 429) {
    state.failed++;
    showCounts();
    showResult({ error: body.error || `HTTP ${resp.status}` });
    return 'error';
  }
  const t = now();
  state.requests.push({ t, allowed: body.allowed });
  if (body.allowed) state.allowed++; else state.denied++;
  showCounts();
  showLevel(body.remaining, body.limit, body.retry_after_ms, body.reset_after_ms);
  showResult(body);
  return body.allowed ? 'allowed' : 'denied';
}

function showCounts() {
  ui.counts.textContent = `${state.allowed} allowed · ${state.denied} denied${state.failed ? ` · ${state.failed} failed` : ''}`;
}

function showResult(r) {
  state.seq++;
  const el = ui.result;
  el.dataset.seq = String(state.seq);
  el.replaceChildren();
  const strong = document.createElement('strong');
  let detail;
  if (r.error) {
    el.className = 'result error';
    el.dataset.outcome = 'error';
    strong.textContent = 'Error';
    detail = r.error;
  } else if (r.allowed) {
    el.className = 'result allowed';
    el.dataset.outcome = 'allowed';
    strong.textContent = 'Allowed';
    detail = `200 OK · ${fmtNumber(r.remaining)} of ${r.limit} left`;
  } else {
    el.className = 'result denied';
    el.dataset.outcome = 'denied';
    strong.textContent = 'Denied';
    detail = `429 Too Many Requests · retry ${fmtMs(r.retry_after_ms)}`;
  }
  el.append(strong, detail);
}

function showHeaders(resp) {
  ui.statusLine.textContent = `HTTP ${resp.status} ${STATUS_TEXT[resp.status] || resp.statusText}`;
  const rows = HEADERS.map((name) => {
    const tr = document.createElement('tr');
    const th = document.createElement('th');
    th.scope = 'row';
    th.textContent = name;
    const td = document.createElement('td');
    const value = resp.headers.get(name);
    td.textContent = value === null ? '(not sent)' : value;
    if (value === null) td.className = 'absent';
    if (name === 'X-RateLimit-Reset' && value !== null) {
      td.textContent += ` (${new Date(Number(value) * 1000).toLocaleTimeString()})`;
    }
    tr.append(th, td);
    return tr;
  });
  ui.headers.replaceChildren(...rows);
}

function mark(label) {
  state.marks.push({ t: now(), label });
}

// Scenarios.

function count(outcomes) {
  const allowed = outcomes.filter((o) => o === 'allowed').length;
  const denied = outcomes.filter((o) => o === 'denied').length;
  const errors = outcomes.length - allowed - denied;
  return `${allowed} allowed, ${denied} denied${errors ? `, ${plural(errors, 'error')}` : ''}`;
}

// The scenario inputs are checked here, as the policy form's are on the
// server, with the error under the field.
const SCENARIO_FIELDS = {
  'burst-n': { label: 'Requests at once', min: 1, max: 200, whole: true },
  'steady-r': { label: 'Requests per second', min: 0.1, max: 50 },
  'steady-s': { label: 'Seconds', min: 1, max: 60 },
  'job-cost': { label: "A job's cost", min: 1, max: 1000, whole: true },
};

// scenarioValue returns the input's number, or null if it is invalid.
function scenarioValue(input) {
  const f = SCENARIO_FIELDS[input.id];
  const raw = input.value.trim();
  const x = raw === '' ? NaN : Number(raw);
  if (!Number.isFinite(x) || x < f.min || x > f.max || (f.whole && !Number.isInteger(x))) return null;
  return x;
}

// checkScenario shows each invalid input's error under it; it returns
// whether all are valid.
function checkScenario(...inputs) {
  let ok = true;
  for (const input of inputs) {
    const f = SCENARIO_FIELDS[input.id];
    const err = $(`${input.id}-error`);
    if (scenarioValue(input) === null) {
      const kind = f.whole ? 'a whole number' : 'a number';
      err.textContent = `${f.label} must be ${kind} from ${f.min} to ${f.max}.`;
      input.setAttribute('aria-invalid', 'true');
      if (ok) input.focus();
      ok = false;
    } else {
      err.textContent = '';
      input.removeAttribute('aria-invalid');
    }
  }
  return ok;
}

function jobLabel() {
  const n = scenarioValue(ui.jobCost);
  ui.job.textContent = n === null ? 'Run a job' : `Run a job of ${n}`;
}

// job runs POST /job: admitted as one request, then charged its cost
// when done, which may drive the level below zero; time repays it.
async function job(event) {
  event.preventDefault();
  ui.scenarioResult.textContent = '';
  if (!checkScenario(ui.jobCost)) return;
  const cost = scenarioValue(ui.jobCost);
  ui.job.disabled = true;
  ui.scenarioResult.textContent = `Job of ${cost}: running…`;
  let resp, body;
  try {
    resp = await fetch('/job', { method: 'POST', body: new URLSearchParams({ cost: String(cost) }) });
    body = await resp.json();
  } catch {
    ui.scenarioResult.textContent = `Job of ${cost}: the demo server did not answer.`;
    ui.job.disabled = false;
    return;
  }
  showHeaders(resp);
  state.requests.push({ t: now(), allowed: resp.status === 200 });
  if (resp.status === 200) {
    state.allowed++;
    showLevel(body.remaining, body.limit, body.retry_after_ms, body.reset_after_ms);
    const debt = body.remaining < 0 ? `, ${fmtNumber(-body.remaining)} in debt until time repays it` : '';
    ui.scenarioResult.textContent = `Job of ${cost}: admitted, then charged ${body.charged} when done: ${fmtNumber(body.remaining)} left${debt}.`;
  } else if (resp.status === 429) {
    state.denied++;
    showLevel(body.remaining, body.limit, body.retry_after_ms, body.reset_after_ms);
    ui.scenarioResult.textContent = `Job of ${cost}: denied (429), retry ${fmtMs(body.retry_after_ms)}.`;
  } else {
    state.failed++;
    ui.scenarioResult.textContent = `Job of ${cost}: ${body.error || `HTTP ${resp.status}`}`;
  }
  showCounts();
  ui.job.disabled = false;
}

function burstLabel() {
  const n = scenarioValue(ui.burstN);
  ui.burst.textContent = n === null ? 'Burst' : `Burst ${n} at once`;
}

function steadyLabel() {
  if (state.steadyRun) return;
  const r = scenarioValue(ui.steadyR);
  const secs = scenarioValue(ui.steadyS);
  ui.steady.textContent = r === null || secs === null ? 'Steady' : `Steady ${r}/s for ${secs} s`;
}

async function burst(event) {
  event.preventDefault();
  ui.scenarioResult.textContent = '';
  if (!checkScenario(ui.burstN)) return;
  const n = scenarioValue(ui.burstN);
  ui.burst.disabled = true;
  ui.scenarioResult.textContent = `Burst of ${n}: sending…`;
  const outcomes = await Promise.all(Array.from({ length: n }, send));
  ui.scenarioResult.textContent = `Burst of ${n}: ${count(outcomes)}.`;
  ui.burst.disabled = false;
}

async function steady(event) {
  event.preventDefault();
  if (state.steadyRun) {
    state.steadyRun.stopped = true;
    return;
  }
  ui.scenarioResult.textContent = '';
  if (!checkScenario(ui.steadyR, ui.steadyS)) return;
  const rate = scenarioValue(ui.steadyR);
  const secs = scenarioValue(ui.steadyS);
  const total = Math.max(1, Math.round(rate * secs));
  const run = { stopped: false };
  state.steadyRun = run;
  ui.steady.textContent = 'Stop';
  const pending = [];
  const start = now();
  for (let i = 0; i < total && !run.stopped; i++) {
    // Scheduled from the start, not from the previous send, so slow
    // answers do not slow the rate down.
    await sleep(Math.max(0, start + (i * 1000) / rate - now()));
    if (run.stopped) break;
    pending.push(send());
    ui.scenarioResult.textContent = `Steady ${rate}/s: ${pending.length} of ${total} sent…`;
  }
  const outcomes = await Promise.all(pending);
  state.steadyRun = null;
  steadyLabel();
  ui.scenarioResult.textContent = `Steady ${rate}/s for ${secs} s${run.stopped ? ' (stopped)' : ''}: ${count(outcomes)}.`;
}

async function reset() {
  try {
    const resp = await fetch('/reset', { method: 'POST' });
    const body = await resp.json();
    if (!resp.ok) throw new Error(body.error || `HTTP ${resp.status}`);
    mark('reset');
    ui.scenarioResult.textContent = 'Reset: the demo key is full again.';
    await poll();
  } catch (err) {
    ui.scenarioResult.textContent = `Reset failed: ${err.message}`;
  }
}

// The policy.

function fieldset(algorithm) {
  return ui.form.querySelector(`fieldset[data-algorithm="${algorithm}"]`);
}

function selectAlgorithm(algorithm) {
  ui.algorithm.value = algorithm;
  for (const fs of ui.form.querySelectorAll('fieldset[data-algorithm]')) {
    const on = fs.dataset.algorithm === algorithm;
    fs.hidden = !on;
    fs.disabled = !on; // a disabled fieldset's inputs are not submitted
  }
  ui.algorithmHelp.textContent = ALGORITHMS[algorithm].help;
  // Only an algorithm that takes leases offers them.
  ui.leases.disabled = !ALGORITHMS[algorithm].leases;
  if (ui.leases.disabled) ui.leases.checked = false;
  ui.leasesHelp.textContent = ui.leases.disabled ? 'This algorithm takes no leases.' : LEASES_HELP;
  // Only the fixed window has calendar periods.
  const fixed = algorithm === 'fixed_window';
  ui.calendarField.hidden = !fixed;
  ui.calendar.disabled = ui.time_zone.disabled = !fixed;
  calendarChanged();
}

// calendarChanged disables the window's length while a calendar period
// stands for it, and the zone while there is none.
function calendarChanged() {
  const on = !ui.calendar.disabled && ui.calendar.value !== 'none';
  ui.time_zone.disabled = !on;
  const fs = fieldset(ui.algorithm.value);
  const window = fs && fs.querySelector('[name="window"]');
  if (window) window.disabled = on;
}

// buildForm fills the algorithm select and one fieldset per algorithm
// from the server's table, each input starting at its default.
function buildForm(table) {
  const el = (tag, props, ...children) => {
    const e = Object.assign(document.createElement(tag), props);
    e.append(...children);
    return e;
  };
  const sets = [];
  for (const alg of table) {
    ALGORITHMS[alg.name] = alg;
    ui.algorithm.append(el('option', { value: alg.name, textContent: alg.label }));
    const fs = el('fieldset', {}, el('legend', { className: 'visually-hidden', textContent: `${alg.label} parameters` }));
    fs.dataset.algorithm = alg.name;
    for (const f of alg.fields) {
      const id = `${alg.short}-${f.name}`;
      const input = el('input', { id, name: f.name, type: 'number', step: 'any', value: String(f.default) });
      input.setAttribute('aria-describedby', `${id}-error`);
      input.dataset.kind = f.kind;
      if (f.kind === 'whole') input.min = String(f.min);
      input.max = String(f.max);
      const lbl = el('label', { htmlFor: id }, `${f.label} `, el('small', { textContent: f.hint }));
      fs.append(el('div', { className: 'field' }, lbl, input, el('p', { id: `${id}-error`, className: 'field-error' })));
    }
    sets.push(fs);
  }
  ui.configError.before(...sets);
}

// showConfig shows the server's configuration; fillForm also copies it
// into the form, which polling must not do while someone edits it.
function showConfig(cfg, fillForm) {
  if (!cfg || !ALGORITHMS[cfg.algorithm]) return; // before the table loads
  const changed = JSON.stringify(cfg) !== JSON.stringify(state.config);
  const first = state.config === null;
  state.config = cfg;
  if (!changed) return;
  const alg = ALGORITHMS[cfg.algorithm];
  const summary = cfg.calendar
    ? `${cfg.limit} per calendar ${cfg.calendar} in ${cfg.time_zone}.`
    : alg.summary.replace(/\{(\w+)\}/g, (_, name) => cfg[name]);
  ui.summary.textContent = `${alg.label}: ${summary}`;
  const fields = alg.fields.filter(({ name }) => !(cfg.calendar && name === 'window'));
  const rows = [['algorithm', cfg.algorithm]].concat(fields.map(({ name, unit }) => [name, `${cfg[name]}${unit ? ` ${unit}` : ''}`]),
    cfg.calendar ? [['calendar', cfg.calendar], ['time_zone', cfg.time_zone]] : [],
    [['leases', cfg.leases ? '50 ms' : 'off']]);
  ui.current.replaceChildren(...rows.flatMap(([name, value]) => {
    const dt = document.createElement('dt');
    dt.textContent = name;
    const dd = document.createElement('dd');
    dd.textContent = value;
    return [dt, dd];
  }));
  ui.unit.textContent = alg.level;
  if (first || fillForm) {
    selectAlgorithm(cfg.algorithm);
    ui.leases.checked = !!cfg.leases;
    ui.calendar.value = cfg.calendar || 'none';
    ui.time_zone.value = cfg.time_zone || 'UTC';
    const fs = fieldset(cfg.algorithm);
    for (const { name } of alg.fields) {
      if (cfg[name] !== undefined) fs.querySelector(`[name="${name}"]`).value = cfg[name];
    }
    calendarChanged();
  }
}

function clearErrors() {
  ui.configError.textContent = '';
  for (const el of ui.form.querySelectorAll('.field-error')) el.textContent = '';
  for (const el of ui.form.querySelectorAll('[aria-invalid]')) el.removeAttribute('aria-invalid');
}

async function applyConfig(event) {
  event.preventDefault();
  clearErrors();
  ui.configStatus.textContent = 'Applying…';
  const body = new URLSearchParams(new FormData(ui.form));
  body.set('leases', ui.leases.checked ? 'true' : 'false'); // an unchecked box sends nothing
  let resp, reply;
  try {
    resp = await fetch('/config', { method: 'POST', body });
    reply = await resp.json();
  } catch {
    ui.configStatus.textContent = '';
    ui.configError.textContent = 'The demo server did not answer.';
    return;
  }
  if (!reply.success) {
    ui.configStatus.textContent = '';
    const msg = reply.error || `HTTP ${resp.status}`;
    const input = !reply.field ? null : ['algorithm', 'leases', 'calendar', 'time_zone'].includes(reply.field)
      ? ui[reply.field]
      : fieldset(ui.algorithm.value).querySelector(`[name="${reply.field}"]`);
    const err = input && $(`${input.id}-error`);
    // Once: under its field when it has one, else below the form.
    if (err) {
      input.setAttribute('aria-invalid', 'true');
      err.textContent = msg;
      input.focus();
    } else {
      ui.configError.textContent = msg;
    }
    return;
  }
  const changed = JSON.stringify(reply.config) !== JSON.stringify(state.config);
  showConfig(reply.config, true);
  if (changed) mark('policy');
  ui.configStatus.textContent = changed ? 'Applied; the demo key starts full.' : 'No change.';
  await poll();
}

// The timeline.

function drawTimeline() {
  const c = ui.canvas;
  const dpr = window.devicePixelRatio || 1;
  const w = c.clientWidth;
  const h = c.clientHeight;
  if (c.width !== Math.round(w * dpr) || c.height !== Math.round(h * dpr)) {
    c.width = Math.round(w * dpr);
    c.height = Math.round(h * dpr);
  }
  const g = c.getContext('2d');
  g.setTransform(dpr, 0, 0, dpr, 0, 0);
  g.clearRect(0, 0, w, h);

  const t1 = now();
  const t0 = t1 - WINDOW_MS;
  const left = 62;
  const right = w - 12;
  const x = (t) => left + ((t - t0) / WINDOW_MS) * (right - left);
  const labelRows = [12, 28]; // the marks' labels, above the level
  const top = 42;
  const levelBottom = 158;
  const allowedY = 184;
  const deniedY = 212;
  const limit = Math.max(1, state.limit);
  // A debt draws the level below the zero line: the scale reaches down
  // to the deepest debt on screen.
  let floor = 0;
  for (const s of state.samples) {
    if (!s.gap && s.t >= t0 - 1000) floor = Math.min(floor, (s.remaining / Math.max(1, s.limit)) * limit);
  }
  c.dataset.floor = String(floor);
  const y = (v) => levelBottom - ((Math.max(floor, Math.min(limit, v)) - floor) / (limit - floor)) * (levelBottom - top);

  // Forget what has scrolled out, keeping one sample to start the line.
  while (state.samples.length > 1 && state.samples[1].t < t0) state.samples.shift();
  while (state.requests.length && state.requests[0].t < t0) state.requests.shift();
  while (state.marks.length && state.marks[0].t < t0) state.marks.shift();

  g.font = '12px system-ui, sans-serif';
  g.textBaseline = 'middle';
  g.lineWidth = 1;

  // Grid and axes.
  g.strokeStyle = '#d0d7de';
  g.fillStyle = '#57606a';
  g.textAlign = 'right';
  for (const v of floor < 0 ? [floor, 0, limit] : [0, limit / 2, limit]) {
    g.beginPath();
    g.moveTo(left, Math.round(y(v)) + 0.5);
    g.lineTo(right, Math.round(y(v)) + 0.5);
    g.stroke();
    g.fillText(String(Math.round(v * 10) / 10), left - 6, y(v));
  }
  g.textAlign = 'center';
  const step = right - left < 400 ? 10 : 5; // seconds between time labels
  for (let s = 0; s <= WINDOW_MS / 1000; s += step) {
    const tx = x(t1 - s * 1000);
    g.fillText(s === 0 ? 'now' : `−${s} s`, tx, h - 10);
  }
  g.textAlign = 'right';
  g.fillStyle = '#1a7f37';
  g.fillText('allowed', left - 4, allowedY);
  g.fillStyle = '#b3261e';
  g.fillText('denied', left - 4, deniedY);

  drawLevel(g, x, y, left, right, y(0), limit);
  drawRequests(g, x, left, right, allowedY, deniedY);
  // Until this tab sends a request, say where its requests will show.
  const empty = state.allowed + state.denied + state.failed === 0;
  c.dataset.empty = String(empty);
  if (empty) {
    g.textAlign = 'center';
    g.fillStyle = '#57606a';
    g.fillText('Each request you send shows here, allowed or denied.', (left + right) / 2, (allowedY + deniedY) / 2);
  }
  drawMarks(g, x, w, labelRows, deniedY + 10);

  requestAnimationFrame(drawTimeline);
}

// drawLevel draws the level as a step line, which holds between samples,
// in runs broken where the store was down.
function drawLevel(g, x, y, left, right, levelBottom, limit) {
  const runs = [];
  let run = null;
  for (const s of state.samples) {
    if (s.gap) {
      if (run) run.end = s.t;
      run = null;
      continue;
    }
    if (!run) {
      run = { points: [], end: null };
      runs.push(run);
    }
    run.points.push(s);
  }
  for (const r of runs) {
    const xs = (t) => Math.max(left, Math.min(right, x(t)));
    const endX = r.end === null ? right : xs(r.end);
    g.beginPath();
    let prevY = 0;
    r.points.forEach((s, i) => {
      const sy = y((s.remaining / Math.max(1, s.limit)) * limit);
      if (i === 0) {
        g.moveTo(xs(s.t), sy);
      } else {
        g.lineTo(xs(s.t), prevY);
        g.lineTo(xs(s.t), sy);
      }
      prevY = sy;
    });
    g.lineTo(endX, prevY);
    g.strokeStyle = '#2f81f7';
    g.lineWidth = 2;
    g.stroke();
    g.lineTo(endX, levelBottom);
    g.lineTo(xs(r.points[0].t), levelBottom);
    g.closePath();
    // levelBottom is the zero line: the area above it is what is left,
    // the area below it the debt.
    g.save();
    g.clip();
    g.fillStyle = 'rgba(47, 129, 247, 0.15)';
    g.fillRect(left, 0, right - left, levelBottom);
    g.fillStyle = 'rgba(207, 34, 46, 0.25)';
    g.fillRect(left, levelBottom, right - left, 1000);
    g.restore();
  }
}

// drawRequests draws one tick per allowed request and one cross per denied
// one. Requests too close in time to tell apart, such as a burst's, are
// spread side by side, newest at their time, with their number beside
// them; groups are laid out from the newest back, so none overlaps.
function drawRequests(g, x, left, right, allowedY, deniedY) {
  const lanes = [
    { allowed: true, y: allowedY, pitch: 4, color: '#1a7f37' },
    { allowed: false, y: deniedY, pitch: 8, color: '#b3261e' },
  ];
  g.font = '11px system-ui, sans-serif';
  g.textAlign = 'right';
  const shown = { allowed: 0, denied: 0, groups: [] };
  for (const lane of lanes) {
    const xs = state.requests.filter((r) => r.allowed === lane.allowed).map((r) => x(r.t));
    // Groups of requests within 6 px of the next one.
    const groups = [];
    for (const rx of xs) {
      const last = groups[groups.length - 1];
      if (last && rx - last.end < 6) {
        last.end = rx;
        last.n++;
      } else {
        groups.push({ end: rx, n: 1 });
      }
    }
    g.strokeStyle = lane.color;
    g.fillStyle = lane.color;
    g.lineWidth = 2;
    let limitX = right + lane.pitch;
    for (let i = groups.length - 1; i >= 0; i--) {
      const grp = groups[i];
      const end = Math.min(grp.end, limitX - lane.pitch);
      g.beginPath();
      for (let k = 0; k < grp.n; k++) {
        const rx = end - k * lane.pitch;
        if (lane.allowed) {
          g.moveTo(rx, lane.y - 9);
          g.lineTo(rx, lane.y + 9);
        } else {
          g.moveTo(rx - 3, lane.y - 5);
          g.lineTo(rx + 3, lane.y + 5);
          g.moveTo(rx + 3, lane.y - 5);
          g.lineTo(rx - 3, lane.y + 5);
        }
      }
      g.stroke();
      shown[lane.allowed ? 'allowed' : 'denied'] += grp.n;
      if (grp.n > 1) shown.groups.push(grp.n);
      let start = end - (grp.n - 1) * lane.pitch - (lane.allowed ? 1 : 3);
      if (grp.n > 1) {
        const label = String(grp.n);
        g.fillText(label, start - 3, lane.y);
        start -= 3 + g.measureText(label).width;
      }
      limitX = start - 4;
      if (limitX < left) break;
    }
  }
  g.font = '12px system-ui, sans-serif';
  // For the browser test: what a visitor can count.
  ui.canvas.dataset.requests = JSON.stringify(shown);
}

// drawMarks draws resets, policy changes and outages as dashed lines, with
// their labels in rows above the level: each label takes the first row
// where it overlaps no other, and joins the last label of the last row
// when none is free, so that labels never print over one another.
function drawMarks(g, x, w, rows, bottom) {
  g.setLineDash([4, 4]);
  g.lineWidth = 1;
  g.strokeStyle = '#57606a';
  g.fillStyle = '#57606a';
  g.textAlign = 'left';
  const placed = rows.map(() => []); // per row: {x0, x1, text, anchor}
  for (const m of state.marks) {
    const mx = Math.round(x(m.t)) + 0.5;
    g.beginPath();
    g.moveTo(mx, rows[rows.length - 1] + 8);
    g.lineTo(mx, bottom);
    g.stroke();
    const width = g.measureText(m.label).width;
    // Right of the line, or left of it near the right edge.
    const x0 = mx + 4 + width <= w ? mx + 4 : mx - 4 - width;
    let row = placed.findIndex((labels) => !labels.length || labels[labels.length - 1].x1 + 6 <= x0);
    if (row === -1) {
      const lastRow = placed[placed.length - 1];
      const last = lastRow[lastRow.length - 1];
      last.text += ` + ${m.label}`;
      last.x1 = last.x0 + g.measureText(last.text).width;
      continue;
    }
    placed[row].push({ x0, x1: x0 + width, text: m.label });
  }
  g.setLineDash([]);
  const drawn = [];
  placed.forEach((labels, i) => {
    let prevEnd = -Infinity;
    for (const l of labels) {
      // A label that joins pushed past the right edge moves left into
      // view, as far as the label before it allows.
      const shift = Math.max(0, Math.min(l.x1 - (w - 2), l.x0 - (prevEnd + 6)));
      g.fillText(l.text, l.x0 - shift, rows[i]);
      prevEnd = l.x1 - shift;
      drawn.push({ row: i, x0: l.x0 - shift, x1: prevEnd, text: l.text });
    }
  });
  // For the browser test: the labels' boxes as drawn.
  ui.canvas.dataset.labels = JSON.stringify(drawn);
}

// Wiring.

ui.submit.addEventListener('click', send);
ui.reset.addEventListener('click', reset);
ui.form.addEventListener('submit', applyConfig);
ui.calendar.addEventListener('change', calendarChanged);
ui.algorithm.addEventListener('change', () => {
  clearErrors();
  selectAlgorithm(ui.algorithm.value);
});
ui.burstForm.addEventListener('submit', burst);
ui.burstN.addEventListener('input', burstLabel);
ui.steadyForm.addEventListener('submit', steady);
ui.jobForm.addEventListener('submit', job);
ui.jobCost.addEventListener('input', jobLabel);
ui.steadyR.addEventListener('input', steadyLabel);
ui.steadyS.addEventListener('input', steadyLabel);
document.addEventListener('visibilitychange', () => { if (!document.hidden) poll(); });

burstLabel();
steadyLabel();
jobLabel();
requestAnimationFrame(drawTimeline);
start();

// start builds the policy form from the server's table of algorithms,
// then follows the server's state.
async function start() {
  for (;;) {
    try {
      const resp = await fetch('/algorithms');
      if (!resp.ok) throw new Error(`HTTP ${resp.status}`);
      buildForm(await resp.json());
      break;
    } catch (err) {
      ui.summary.textContent = `Loading the algorithms failed (${err.message}); retrying…`;
      await sleep(1000);
    }
  }
  selectAlgorithm(ui.algorithm.value);
  pollLoop();
}
