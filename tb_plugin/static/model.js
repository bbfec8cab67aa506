// Data access for the tfdiag tab: fetches the plugin's JSON routes with relative URLs
// (the iframe's <base> is .../data/plugin/tfdiag/, so this works under --path_prefix)
// and caches each response for a short time, sharing requests already in flight.

/**
 * @typedef {{p50: number, p95: number, mean: number}} StepTime
 * @typedef {{action: string, change: string, predicted_speedup: (number|null)}} Recommendation
 * @typedef {{kind: string, severity: string, title: string, summary: string,
 *            tasks: string[], evidence: Object<string, *>, recommendation: Recommendation}} Finding
 * @typedef {{task: string, steps: number, step_time_ms: StepTime, input_wait_frac: number,
 *            examples: number}} Worker
 * @typedef {{schema_version: number, run: Object<string, *>, summary: Object<string, *>,
 *            workers: Worker[], findings: Finding[]}} Report
 */

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
  const promise = fetch(url, {credentials: 'same-origin'}).then(async (response) => {
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

/** @return {Promise<Report>} */
export function getReport(run, options) {
  return fetchJson('report', {run}, options);
}

/** @return {Promise<{data: Object[], layout: Object}>} a plotly figure */
export function getFigure(run, name, options) {
  return fetchJson('figure', {run, name}, options);
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
