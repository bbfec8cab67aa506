// Data access for the tfdiag tab: fetches the plugin's JSON routes with relative URLs
// (the iframe's <base> is .../data/plugin/tfdiag/, so this works under --path_prefix)
// and caches each response for a short time, sharing requests already in flight. The
// routes answer with ETags, so a forced re-fetch of an unchanged answer is a 304.

/**
 * @typedef {{p50: number, p95: number, mean: number}} StepTime
 * @typedef {{action: string, change: string, predicted_speedup: (number|null),
 *            predicted_speedup_text: string}} Recommendation
 * @typedef {{kind: string, severity: string, title: string, summary: string,
 *            tasks: string[], evidence: Object<string, *>, recommendation: Recommendation}} Finding
 * @typedef {{task: string, steps: number, step_time_ms: StepTime, input_wait_frac: number,
 *            examples: number, breakdown_ms: Object<string, number>}} Worker
 * @typedef {{schema_version: number, run: Object<string, *>, summary: Object<string, *>,
 *            workers: Worker[], findings: Finding[]}} Report
 * @typedef {{base: *, new: *, ratio: (number|null), change_pct: (number|null)}} Metric
 * @typedef {{kind: string, severity: string, title: string, tasks: string[],
 *            predicted_speedup: (number|null)}} FindingEntry
 * @typedef {{task: string, steps: number, idle_s: (number|null)}} Progress
 * @typedef {{task: string, signal: string, detail: string}} SilentTask
 * @typedef {{state: string, reason: string, progress: Progress[], findings: FindingEntry[],
 *            silent: SilentTask[], time_ns: number}} Now
 * @typedef {{time_ns: number, time_s: (number|null), task: string, kind: string, detail: string,
 *            message: string, root: boolean}} FaultEvent
 * @typedef {{events: FaultEvent[], roots: {task: string, state: string}[], victims: Object[],
 *            error?: string}} FaultTimeline
 * @typedef {{views: Array<[string, string[]]>, compare: string[]}} Figures
 *     views: [section title, [figure name, ...]] in order; compare: the charts of each compared run
 * @typedef {{base_run: string, new_run: string, examples_per_s: Metric, step_time_ms: Metric,
 *            primary_bottleneck: {base: ?string, new: ?string},
 *            findings: {resolved: FindingEntry[], new: FindingEntry[],
 *                       persisting: {kind: string, base: FindingEntry, new: FindingEntry}[]}}} Comparison
 */

/**
 * A run whose first read is not done: the server answered 202 with its progress
 * (run, stage, files_read, files, bytes_read, bytes); ask again shortly.
 */
export class LoadingError extends Error {
  constructor(progress) {
    super(`${progress.run} is being read`);
    this.progress = progress;
  }
}

/** How long a response is reused before it is fetched again (ms). */
export const DEFAULT_MAX_AGE_MS = 5000;

/** @type {Map<string, {time: number, promise: Promise<*>}>} */
const cache = new Map();

/**
 * Fetches JSON from a route of this plugin.
 * @param {string} route e.g. "runs" (relative: no leading slash)
 * @param {Object<string, string>=} params query arguments
 * @param {{maxAgeMs?: number}=} options maxAgeMs 0 forces a new request
 * @return {Promise<*>}
 */
export function fetchJson(route, params = {}, {maxAgeMs = DEFAULT_MAX_AGE_MS} = {}) {
  const query = new URLSearchParams(params).toString();
  const url = query ? `./${route}?${query}` : `./${route}`;
  const now = Date.now();
  const hit = cache.get(url);
  if (hit && now - hit.time < maxAgeMs) {
    return hit.promise;
  }
  const promise = fetch(url, {credentials: 'same-origin', cache: 'no-cache'}).then(async (response) => {
    if (!response.ok) {
      let message = `${response.status} ${response.statusText}`;
      try {
        const body = await response.json();
        if (body && typeof body.error === 'string') message = body.error;
      } catch (e) {
        // Not JSON: keep the status line.
      }
      throw new Error(message);
    }
    if (response.status === 202) throw new LoadingError(await response.json());
    return response.json();
  });
  cache.set(url, {time: now, promise});
  promise.catch(() => {
    if (cache.get(url)?.promise === promise) cache.delete(url);
  });
  return promise;
}

/** @return {Promise<string[]>} the names of the runs under the logdir */
export function getRuns(options) {
  return fetchJson('runs', {}, options);
}

/**
 * The charts the tab shows (defined once, in tfdiag.report.figures); they do not change
 * while TensorBoard runs, so the first answer is kept.
 * @return {Promise<Figures>}
 */
export function getFigureList() {
  return fetchJson('figures', {}, {maxAgeMs: Infinity});
}

/** @return {Promise<Report>} */
export function getReport(run, options) {
  return fetchJson('report', {run}, options);
}

/** @return {Promise<Now>} where the run stands now (never cached: it moves with the clock) */
export function getNow(run) {
  return fetchJson('now', {run}, {maxAgeMs: 0});
}

/** @return {Promise<FaultTimeline>} */
export function getFaults(run, options) {
  return fetchJson('faults', {run}, options);
}

/** @return {Promise<{data: Object[], layout: Object}>} a plotly figure */
export function getFigure(run, name, options) {
  return fetchJson('figure', {run, name}, options);
}

/** @return {Promise<Comparison>} */
export function getComparison(base, newRun, options) {
  return fetchJson('compare', {base, new: newRun}, options);
}

/** @type {Promise<*>|null} */
let plotlyPromise = null;

/**
 * Loads plotly.js (served by the plugin from the installed plotly package) once, as a
 * classic script: its bundle sets window.Plotly and is not an ES module.
 * @return {Promise<*>} window.Plotly
 */
export function loadPlotly() {
  if (!plotlyPromise) {
    plotlyPromise = new Promise((resolve, reject) => {
      if (window.Plotly) {
        resolve(window.Plotly);
        return;
      }
      const script = document.createElement('script');
      script.src = './plotly.min.js';
      script.async = true;
      script.onload = () => (window.Plotly ? resolve(window.Plotly) : reject(new Error('plotly.js did not load')));
      script.onerror = () => {
        plotlyPromise = null;
        reject(new Error('cannot load plotly.js'));
      };
      document.head.appendChild(script);
    });
  }
  return plotlyPromise;
}

/** @return {boolean} whether this browser can draw WebGL traces (scattergl) */
export function hasWebGL() {
  try {
    const canvas = document.createElement('canvas');
    return Boolean(canvas.getContext('webgl2') || canvas.getContext('webgl'));
  } catch (e) {
    return false;
  }
}

/**
 * A figure this browser can draw: WebGL traces become SVG ones when WebGL is missing
 * (remote desktops, headless browsers, GPU-less VMs).
 * @param {{data: Object[], layout: Object}} figure
 * @param {boolean} webgl
 */
export function drawableFigure(figure, webgl) {
  if (webgl) return figure;
  const data = (figure.data || []).map((trace) => (trace.type === 'scattergl' ? {...trace, type: 'scatter'} : trace));
  return {...figure, data};
}

/** @return {boolean} whether the figure was drawn without data (layout.meta.empty) */
export function isEmptyFigure(figure) {
  return Boolean(figure && figure.layout && figure.layout.meta && figure.layout.meta.empty);
}
