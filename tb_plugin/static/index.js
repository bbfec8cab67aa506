// Entry point of the tfdiag tab (a TensorBoard dynamic plugin: TensorBoard imports this
// module inside the tab's iframe and calls render()).

import * as model from './model.js';
import * as views from './views.js';

/** How often the open run is re-fetched, so a live run updates (ms). */
const AUTO_REFRESH_MS = 15000;

const state = {
  /** @type {string[]} */ runs: [],
  /** @type {string|null} */ run: null,
  /** Incremented on every load; a response for an older generation is dropped. */
  generation: 0,
  /** JSON of the report on screen, to skip redrawing an unchanged one. */
  shownReport: '',
};

/** @type {Object<string, HTMLElement>} */
const dom = {};

export async function render() {
  const link = document.createElement('link');
  link.rel = 'stylesheet';
  link.href = './style.css';
  document.head.appendChild(link);

  dom.toolbar = views.h('div', {className: 'toolbar'});
  dom.status = views.h('span', {className: 'status'});
  dom.main = views.h('main', {className: 'overview'});
  const refresh = views.h('button', {className: 'refresh', type: 'button', onClick: () => reload(true)}, 'Refresh');
  document.body.appendChild(views.h('div', {className: 'tfdiag'}, views.h('div', {className: 'bar'}, dom.toolbar, refresh, dom.status), dom.main));

  await reload(false);
  setInterval(() => {
    if (document.visibilityState === 'visible') reload(true, {quiet: true});
  }, AUTO_REFRESH_MS);
}

/**
 * Fetches the run list, then the selected run.
 * @param {boolean} force bypass the response cache
 * @param {{quiet?: boolean}=} options quiet: keep the current view while loading
 */
async function reload(force, {quiet = false} = {}) {
  const maxAgeMs = force ? 0 : undefined;
  let runs;
  try {
    runs = await model.getRuns({maxAgeMs});
  } catch (error) {
    showError(`Cannot list runs: ${error.message}`);
    return;
  }
  if (runs.join('\n') !== state.runs.join('\n')) {
    state.runs = runs;
    if (!runs.includes(state.run)) state.run = runs.length ? runs[0] : null;
    dom.toolbar.replaceChildren(views.runSelector(runs, state.run, (run) => selectRun(run)));
  }
  if (state.run === null) {
    dom.main.replaceChildren(views.message('No tfdiag runs under the logdir yet (a run is a directory holding plugins/tfdiag).'));
    return;
  }
  await showRun(state.run, {force, quiet});
}

function selectRun(run) {
  state.run = run;
  state.shownReport = '';
  showRun(run, {force: false, quiet: false});
}

/**
 * Loads and draws one run. Responses that arrive after another run was selected (or a
 * newer load started) are dropped.
 */
async function showRun(run, {force, quiet}) {
  const generation = ++state.generation;
  const current = () => generation === state.generation && state.run === run;
  const maxAgeMs = force ? 0 : undefined;
  if (!quiet) {
    dom.status.textContent = `Loading ${run}…`;
    if (!state.shownReport) dom.main.replaceChildren(views.message('Loading…'));
  }
  let report;
  try {
    report = await model.getReport(run, {maxAgeMs});
  } catch (error) {
    if (current()) showError(`Cannot load ${run}: ${error.message}`);
    return;
  }
  if (!current()) return;
  const reportJson = JSON.stringify(report);
  dom.status.textContent = `Updated ${new Date().toLocaleTimeString()}`;
  if (reportJson === state.shownReport) return;
  state.shownReport = reportJson;

  const chart = views.chartBox('step_time');
  dom.main.replaceChildren(
    views.summaryView(report),
    chart,
    views.findingsView(report.findings || []),
    views.workersView(report.workers || []) || '',
  );
  await drawFigure(chart.querySelector('.chart-plot'), run, 'step_time', {maxAgeMs, current});
}

async function drawFigure(element, run, name, {maxAgeMs, current}) {
  try {
    const [Plotly, figure] = await Promise.all([model.loadPlotly(), model.getFigure(run, name, {maxAgeMs})]);
    if (!current() || !element.isConnected) return;
    const drawable = model.drawableFigure(figure, model.hasWebGL());
    await Plotly.react(element, drawable.data, drawable.layout, {responsive: true, displaylogo: false});
  } catch (error) {
    if (current() && element.isConnected) element.replaceChildren(views.message(`Cannot draw the chart: ${error.message}`, 'error'));
  }
}

function showError(text) {
  dom.status.textContent = '';
  state.shownReport = '';
  dom.main.replaceChildren(views.message(text, 'error'));
}
