// Pure DOM builders for the tfdiag tab. Every string from the server (run and task
// names, finding text, evidence) is written as a text node, never parsed as HTML.

/**
 * Creates an element. Strings and numbers among the children become text nodes.
 * @param {string} tag
 * @param {Object<string, *>=} props className, title, dataset, or attributes (attr-*)
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

/** @param {number|null|undefined} speedup e.g. 1.35 */
export function speedupText(speedup) {
  if (speedup === null || speedup === undefined) return 'speed-up unknown';
  return `${number(speedup, 2)}× predicted (+${number((speedup - 1) * 100, 0)} % throughput)`;
}

/**
 * The run selector.
 * @param {string[]} runs
 * @param {string|null} selected
 * @param {function(string)} onChange
 */
export function runSelector(runs, selected, onChange) {
  const select = h('select', {className: 'run-select', 'aria-label': 'run'});
  for (const run of runs) {
    const option = h('option', {}, run);
    option.value = run;
    if (run === selected) option.selected = true;
    select.appendChild(option);
  }
  select.addEventListener('change', () => onChange(select.value));
  return h('label', {className: 'run-label'}, 'Run ', select);
}

/** @param {import('./model.js').Finding} finding */
function primaryBox(finding) {
  const rec = finding.recommendation || {};
  return h(
    'section',
    {className: `primary severity-${finding.severity}`, dataset: {kind: finding.kind}},
    h('div', {className: 'primary-label'}, 'Primary bottleneck'),
    h('div', {className: 'primary-title'}, h('span', {className: 'kind'}, finding.kind), ' — ', finding.title),
    h('div', {className: 'speedup'}, speedupText(rec.predicted_speedup)),
    rec.action ? h('div', {className: 'action'}, rec.action) : null,
    rec.change ? h('pre', {className: 'change'}, rec.change) : null,
  );
}

/** @param {string} label @param {*} value */
function stat(label, value) {
  return h('div', {className: 'stat'}, h('div', {className: 'stat-label'}, label), h('div', {className: 'stat-value'}, value));
}

/**
 * The summary: the primary bottleneck first, then the run's key numbers.
 * @param {import('./model.js').Report} report
 */
export function summaryView(report) {
  const run = report.run || {};
  const summary = report.summary || {};
  const findings = report.findings || [];
  const primary = findings.find((f) => f.kind === summary.primary_bottleneck) || null;
  const tasks = run.tasks || [];
  return h(
    'div',
    {className: 'summary'},
    primary ? primaryBox(primary) : h('section', {className: 'primary none'}, 'No bottleneck found.'),
    h(
      'div',
      {className: 'stats'},
      stat('Strategy', run.strategy || 'unknown'),
      stat('Tasks', `${tasks.length}: ${tasks.join(', ')}`),
      stat('Throughput', `${number(summary.examples_per_s, 1)} examples/s`),
      stat('Step time', `${number(summary.step_time_ms, 2)} ms`),
      stat('Steps', number(summary.steps, 0)),
    ),
    warningsView(run.warnings || [], run.skipped_records || 0),
  );
}

function warningsView(warnings, skipped) {
  if (!warnings.length && !skipped) return null;
  return h(
    'details',
    {className: 'warnings'},
    h('summary', {}, `${warnings.length} warning(s), ${skipped} skipped record(s)`),
    h('ul', {}, warnings.map((w) => h('li', {}, w))),
  );
}

/** Evidence values are numbers, strings, lists or maps (task -> number). */
function evidenceValue(value) {
  if (value === null || value === undefined) return '–';
  if (Array.isArray(value)) return value.map((v) => (typeof v === 'object' ? JSON.stringify(v) : String(v))).join(', ');
  if (typeof value === 'object') {
    return h(
      'span',
      {className: 'evidence-map'},
      Object.entries(value).map(([k, v]) => h('span', {className: 'evidence-item'}, `${k}: ${typeof v === 'object' ? JSON.stringify(v) : v}`)),
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
    ),
    h('p', {className: 'finding-summary'}, finding.summary),
    finding.tasks && finding.tasks.length ? h('p', {className: 'tasks'}, 'Tasks: ', finding.tasks.join(', ')) : null,
    evidence.length
      ? h('table', {className: 'evidence'}, h('tbody', {}, evidence.map(([k, v]) => h('tr', {}, h('th', {}, k), h('td', {}, evidenceValue(v))))))
      : null,
    h(
      'div',
      {className: 'recommendation'},
      h('div', {className: 'speedup'}, speedupText(rec.predicted_speedup)),
      rec.action ? h('div', {className: 'action'}, rec.action) : null,
      rec.change ? h('pre', {className: 'change'}, rec.change) : null,
    ),
  );
}

/** @param {import('./model.js').Finding[]} findings */
export function findingsView(findings) {
  return h(
    'section',
    {className: 'findings'},
    h('h2', {}, `Findings (${findings.length})`),
    findings.length ? findings.map(findingView) : h('p', {}, 'Nothing to report.'),
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

/** A box a plotly chart is drawn into. */
export function chartBox(name) {
  return h('section', {className: 'chart', dataset: {figure: name}}, h('div', {className: 'chart-plot'}));
}

/** @param {string} text @param {string=} kind "error" or "info" */
export function message(text, kind = 'info') {
  return h('div', {className: `message ${kind}`}, text);
}
