// Pure DOM builders for the tfdiag tab. Every string from the server (run and task
// names, finding text, evidence, variable names) is written as a text node (h() makes
// strings children text nodes; attributes go through setAttribute), never parsed as HTML.

/**
 * Creates an element. Strings and numbers among the children become text nodes.
 * @param {string} tag
 * @param {Object<string, *>=} props className, title, dataset, on<Event>, or attributes
 * @param {...(Node|string|number|null|undefined|Array)} children
 * @return {HTMLElement}
 */
export function h(tag, props = {}, ...children) {
  const element = document.createElement(tag);
  for (const [key, value] of Object.entries(props || {})) {
    if (value === undefined || value === null) continue;
    if (key === 'className') element.className = value;
    else if (key === 'title') element.title = String(value);
    else if (key === 'dataset') Object.assign(element.dataset, value);
    else if (key.startsWith('on')) element.addEventListener(key.slice(2).toLowerCase(), value);
    else element.setAttribute(key, String(value));
  }
  append(element, children);
  return element;
}

function append(element, children) {
  for (const child of children) {
    if (child === null || child === undefined || child === false) continue;
    if (Array.isArray(child)) append(element, child);
    else if (child instanceof Node) element.appendChild(child);
    else element.appendChild(document.createTextNode(String(child)));
  }
}

/** @param {number|null|undefined} value @param {number=} digits */
export function number(value, digits = 1) {
  if (value === null || value === undefined || Number.isNaN(value)) return '–';
  return Number(value).toLocaleString(undefined, {maximumFractionDigits: digits, minimumFractionDigits: 0});
}

/**
 * The predicted speed-up as the reports write it (formatted by the backend, e.g. "+35 %").
 * @param {import('./model.js').Recommendation} rec
 */
export function speedupText(rec) {
  const text = rec && rec.predicted_speedup_text;
  return !text || text === 'unknown' ? 'speed-up unknown' : `${text} predicted throughput`;
}

/** @param {number|null|undefined} pct a signed percent change */
function changeText(pct) {
  if (pct === null || pct === undefined) return '–';
  return `${pct > 0 ? '+' : ''}${number(pct, 1)} %`;
}

const SEVERITIES = ['critical', 'warning', 'info'];

function severityRank(severity) {
  const rank = SEVERITIES.indexOf(severity);
  return rank < 0 ? SEVERITIES.length : rank;
}

/**
 * A run selector.
 * @param {string[]} runs
 * @param {string|null} selected
 * @param {function(string)} onChange
 * @param {{label?: string, className?: string, none?: string}=} options none: text of an empty first option
 */
export function runSelector(runs, selected, onChange, {label = 'Run', className = 'run-select', none} = {}) {
  const select = h('select', {className, 'aria-label': label.toLowerCase()});
  if (none !== undefined) {
    const option = h('option', {}, none);
    option.value = '';
    select.appendChild(option);
  }
  for (const run of runs) {
    const option = h('option', {}, run);
    option.value = run;
    if (run === selected) option.selected = true;
    select.appendChild(option);
  }
  select.addEventListener('change', () => onChange(select.value));
  return h('label', {className: 'run-label'}, `${label} `, select);
}

/** @param {import('./model.js').Finding} finding */
export function primaryBox(finding) {
  const rec = finding.recommendation || {};
  return h(
    'section',
    {className: `primary severity-${finding.severity}`, dataset: {kind: finding.kind}},
    h('div', {className: 'primary-label'}, 'Primary bottleneck'),
    h('div', {className: 'primary-title'}, h('span', {className: 'kind'}, finding.kind), ' — ', finding.title),
    h('div', {className: 'speedup'}, speedupText(rec)),
    finding.tasks && finding.tasks.length ? h('div', {className: 'tasks'}, 'Tasks: ', finding.tasks.join(', ')) : null,
    rec.action ? h('div', {className: 'action'}, rec.action) : null,
    rec.change ? h('pre', {className: 'change'}, h('code', {}, rec.change)) : null,
  );
}

/** @param {string} label @param {*} value @param {string=} className */
function stat(label, value, className = '') {
  return h('div', {className: `stat ${className}`}, h('div', {className: 'stat-label'}, label), h('div', {className: 'stat-value'}, value));
}

/**
 * The overview: the primary bottleneck first, then the run's strategy, tasks and health.
 * @param {import('./model.js').Report} report
 */
export function overviewView(report) {
  const run = report.run || {};
  const summary = report.summary || {};
  const findings = report.findings || [];
  const primary = findings.find((f) => f.kind === summary.primary_bottleneck) || null;
  const tasks = run.tasks || [];
  const skipped = run.skipped_records || 0;
  const warnings = run.warnings || [];
  const healthy = !skipped && !warnings.length;
  return h(
    'div',
    {className: 'summary'},
    primary ? primaryBox(primary) : h('section', {className: 'primary none'}, h('div', {className: 'primary-label'}, 'Primary bottleneck'), h('div', {className: 'primary-title'}, 'No bottleneck found.')),
    h(
      'div',
      {className: 'stats'},
      stat('Strategy', run.strategy || 'unknown (no manifest)'),
      stat('Throughput', `${number(summary.examples_per_s, 1)} examples/s`),
      stat('Step time', `${number(summary.step_time_ms, 2)} ms`),
      stat('Steps', number(summary.steps, 0)),
      stat('Health', healthy ? 'ok' : `${number(skipped, 0)} skipped record(s), ${warnings.length} warning(s)`, healthy ? 'ok' : 'unhealthy'),
    ),
    h('div', {className: 'task-list'}, h('span', {className: 'stat-label'}, `Tasks (${tasks.length}) `), tasks.map((t) => h('span', {className: 'task'}, t))),
    warningsView(warnings, skipped, !summary.steps),
  );
}

/**
 * The run's warnings (what could not be read, and why), as text.
 * @param {string[]} warnings @param {number} skipped @param {boolean} open shown unfolded (a run with nothing else to show)
 */
function warningsView(warnings, skipped, open) {
  if (!warnings.length && !skipped) return null;
  return h(
    'details',
    {className: 'warnings', open: open ? '' : undefined},
    h('summary', {}, `${warnings.length} warning(s), ${skipped} skipped record(s)`),
    h('ul', {}, warnings.map((w) => h('li', {}, w))),
  );
}

/** Evidence values are numbers, strings, lists or maps (task -> number). */
function evidenceValue(value) {
  if (value === null || value === undefined) return '–';
  if (typeof value === 'number') return number(value, 4);
  if (Array.isArray(value)) return value.map((v) => (typeof v === 'object' ? JSON.stringify(v) : String(v))).join(', ');
  if (typeof value === 'object') {
    return h(
      'span',
      {className: 'evidence-map'},
      Object.entries(value).map(([k, v]) => h('span', {className: 'evidence-item'}, `${k}: ${typeof v === 'object' ? JSON.stringify(v) : typeof v === 'number' ? number(v, 4) : v}`)),
    );
  }
  return String(value);
}

/** @param {import('./model.js').Finding} finding */
export function findingView(finding) {
  const rec = finding.recommendation || {};
  const evidence = Object.entries(finding.evidence || {});
  return h(
    'article',
    {className: `finding severity-${finding.severity}`, dataset: {kind: finding.kind}},
    h(
      'header',
      {},
      h('span', {className: `badge severity-${finding.severity}`}, finding.severity),
      h('span', {className: 'kind'}, finding.kind),
      h('span', {className: 'finding-title'}, finding.title),
      h('span', {className: 'speedup'}, speedupText(rec)),
    ),
    h('p', {className: 'finding-summary'}, finding.summary),
    finding.tasks && finding.tasks.length ? h('p', {className: 'tasks'}, 'Tasks: ', finding.tasks.join(', ')) : null,
    evidence.length
      ? h('details', {className: 'evidence-box', open: ''}, h('summary', {}, 'Evidence'),
          h('table', {className: 'evidence'}, h('tbody', {}, evidence.map(([k, v]) => h('tr', {}, h('th', {}, k), h('td', {}, evidenceValue(v)))))))
      : null,
    h(
      'div',
      {className: 'recommendation'},
      rec.action ? h('div', {className: 'action'}, h('strong', {}, 'Recommendation: '), rec.action) : null,
      rec.change ? h('pre', {className: 'change'}, h('code', {}, rec.change)) : null,
    ),
  );
}

/**
 * All findings, most severe first (ties keep the report's order: largest speed-up first).
 * @param {import('./model.js').Finding[]} findings
 */
export function findingsView(findings) {
  const ordered = findings.map((f, i) => [f, i]).sort((a, b) => severityRank(a[0].severity) - severityRank(b[0].severity) || a[1] - b[1]).map(([f]) => f);
  const counts = SEVERITIES.map((s) => [s, findings.filter((f) => f.severity === s).length]).filter(([, n]) => n);
  return h(
    'section',
    {className: 'findings'},
    h('h2', {}, `Findings (${findings.length})`, counts.length ? h('span', {className: 'counts'}, counts.map(([s, n]) => h('span', {className: `badge severity-${s}`}, `${n} ${s}`))) : null),
    ordered.length ? ordered.map(findingView) : h('p', {className: 'nothing'}, 'No detector found a problem in this run.'),
  );
}

/** @param {import('./model.js').Worker[]} workers */
export function workersView(workers) {
  if (!workers.length) return null;
  const head = ['worker', 'steps', 'p50 ms', 'p95 ms', 'mean ms', 'input wait', 'examples'];
  return h(
    'section',
    {className: 'workers'},
    h('h2', {}, 'Workers'),
    h(
      'table',
      {},
      h('thead', {}, h('tr', {}, head.map((c) => h('th', {}, c)))),
      h(
        'tbody',
        {},
        workers.map((w) =>
          h(
            'tr',
            {},
            h('td', {}, w.task),
            h('td', {}, number(w.steps, 0)),
            h('td', {}, number(w.step_time_ms?.p50, 2)),
            h('td', {}, number(w.step_time_ms?.p95, 2)),
            h('td', {}, number(w.step_time_ms?.mean, 2)),
            h('td', {}, `${number((w.input_wait_frac || 0) * 100, 1)} %`),
            h('td', {}, number(w.examples, 0)),
          ),
        ),
      ),
    ),
  );
}

/**
 * Where a run stands now: its state and why, each worker's progress, the current findings,
 * and the tasks gone silent (their rows highlighted).
 * @param {import('./model.js').Now} now
 */
export function nowView(now) {
  const silent = now.silent || [];
  const silentTasks = new Set(silent.map((s) => s.task));
  const progress = now.progress || [];
  const findings = now.findings || [];
  return h(
    'section',
    {className: 'now', dataset: {state: now.state}},
    h('h2', {}, 'Now ', h('span', {className: 'state-badge', dataset: {state: now.state}}, now.state), ' ', h('span', {className: 'now-reason'}, now.reason)),
    progress.length
      ? h(
          'table',
          {className: 'progress'},
          h('thead', {}, h('tr', {}, ['worker', 'steps', 'last step'].map((c) => h('th', {}, c)))),
          h(
            'tbody',
            {},
            progress.map((w) =>
              h(
                'tr',
                {className: silentTasks.has(w.task) ? 'silent' : ''},
                h('td', {}, w.task),
                h('td', {}, number(w.steps, 0)),
                h('td', {}, w.idle_s === null || w.idle_s === undefined ? '–' : `${number(w.idle_s, 1)} s ago`),
              ),
            ),
          ),
        )
      : h('p', {className: 'nothing'}, 'No worker has stepped yet.'),
    silent.length
      ? h('div', {className: 'silent-tasks'}, h('h3', {}, `Silent tasks (${silent.length})`),
          h('ul', {}, silent.map((s) => h('li', {className: 'silent', dataset: {signal: s.signal}}, h('span', {className: 'task'}, s.task), ` ${s.detail}`))))
      : null,
    h('div', {className: 'now-findings'}, h('h3', {}, `Current findings (${findings.length})`),
      findings.length ? h('ul', {}, findings.map(entryLine)) : h('p', {className: 'nothing'}, 'none')),
  );
}

/**
 * The run's faults and its tasks' last words in time order; the task whose failure ended
 * the job (the root) is named first and its rows marked.
 * @param {import('./model.js').FaultTimeline} timeline
 */
export function faultsView(timeline) {
  const events = timeline.events || [];
  const roots = timeline.roots || [];
  const detail = (e) => (e.message && e.message !== e.detail ? h('details', {}, h('summary', {}, e.detail), h('pre', {className: 'message-text'}, e.message)) : e.detail);
  return h(
    'section',
    {className: 'faults'},
    h('h2', {}, `Faults and last words (${events.length})`),
    timeline.error ? message(timeline.error, 'error') : null,
    roots.length
      ? h('div', {className: 'job-end'}, h('strong', {}, 'The job ended on a failure. Root: '),
          roots.map((r) => h('div', {className: 'root'}, h('span', {className: 'task'}, r.task), ` ${r.state}`)))
      : null,
    events.length
      ? h(
          'table',
          {className: 'fault-timeline'},
          h('thead', {}, h('tr', {}, ['time (s)', 'task', 'event', 'detail'].map((c) => h('th', {}, c)))),
          h(
            'tbody',
            {},
            events.map((e) =>
              h(
                'tr',
                {className: e.root ? 'root' : '', dataset: {kind: e.kind}},
                h('td', {}, number(e.time_s, 3)),
                h('td', {}, e.task, e.root ? h('span', {className: 'badge root-badge'}, 'root') : null),
                h('td', {}, e.kind),
                h('td', {}, detail(e)),
              ),
            ),
          ),
        )
      : h('p', {className: 'nothing'}, 'No faults and no last words recorded.'),
  );
}

/** A box a plotly chart is drawn into. */
export function chartBox(name) {
  return h('div', {className: 'chart', dataset: {figure: name}}, h('div', {className: 'chart-plot'}));
}

/** A titled section of charts. */
export function viewSection(title, boxes) {
  return h('section', {className: 'view'}, h('h2', {}, title), h('div', {className: 'charts'}, boxes));
}

function entryLine(entry) {
  return h(
    'li',
    {dataset: {kind: entry.kind}},
    h('span', {className: `badge severity-${entry.severity}`}, entry.severity),
    ' ',
    h('span', {className: 'kind'}, entry.kind),
    ` — ${entry.title}`,
  );
}

/**
 * The comparison of two runs: throughput and step-time change, findings resolved, new
 * and persisting. Throughput up and step time down are improvements.
 * @param {import('./model.js').Comparison} comparison
 */
export function comparisonView(comparison) {
  const findings = comparison.findings || {resolved: [], new: [], persisting: []};
  const metric = (label, m, unit, higherIsBetter) => {
    const pct = m.change_pct;
    const better = pct === null || pct === undefined || pct === 0 ? '' : (pct > 0) === higherIsBetter ? 'better' : 'worse';
    return stat(label, `${number(m.base, 2)} → ${number(m.new, 2)} ${unit} (${changeText(pct)})`, `metric ${better}`);
  };
  const list = (title, entries, className) =>
    h('div', {className: `compare-list ${className}`}, h('h3', {}, `${title} (${entries.length})`), entries.length ? h('ul', {}, entries.map(entryLine)) : h('p', {className: 'nothing'}, 'none'));
  const primary = comparison.primary_bottleneck || {};
  return h(
    'section',
    {className: 'comparison'},
    h('h2', {}, 'Comparison: ', h('span', {className: 'run-name'}, comparison.base_run), ' → ', h('span', {className: 'run-name'}, comparison.new_run)),
    h(
      'div',
      {className: 'stats'},
      metric('Throughput', comparison.examples_per_s, 'examples/s', true),
      metric('Step time', comparison.step_time_ms, 'ms', false),
      stat('Primary bottleneck', `${primary.base || 'none'} → ${primary.new || 'none'}`),
    ),
    h(
      'div',
      {className: 'compare-lists'},
      list('Resolved', findings.resolved, 'resolved'),
      list('New', findings.new, 'new'),
      list('Persisting', findings.persisting.map((p) => ({...p.new, title: `${p.base.severity} → ${p.new.severity}: ${p.new.title}`})), 'persisting'),
    ),
  );
}

/** Two columns, side by side. */
export function sideBySide(left, right) {
  return h('div', {className: 'side-by-side'}, h('div', {className: 'side'}, left), h('div', {className: 'side'}, right));
}

/** @param {string} text @param {string=} kind "error" or "info" */
export function message(text, kind = 'info') {
  return h('div', {className: `message ${kind}`}, text);
}
