// Entry point of the tfdiag tab (a TensorBoard dynamic plugin: TensorBoard imports this
// module inside the tab's iframe and calls render()).
//
// Live runs: a dynamic plugin's iframe cannot hook TensorBoard's reload button or its
// auto-reload timer, so the tab polls on its own: every AUTO_REFRESH_MS while the tab
// is visible (document.visibilityState), and at once when it becomes visible again
// after that long. A poll re-fetches the report (a 304 when the run did not change)
// and redraws only when it changed; charts are updated in place (Plotly.react), so the
// page keeps its scroll position.
//
// A run whose first read is not done answers 202 with its progress: the page shows it
// and asks again every LOADING_POLL_MS until the run answers. Where an earlier session
// saved its answers for the same files, they answer meanwhile, and the Now panel and any
// chart not saved ask again the same way.
//
// The Now panel of a run (/now: its state, each worker's progress, current findings,
// silent tasks) refreshes on its own every NOW_REFRESH_MS while the run's state is
// "running" and the tab is visible; in any other state it follows the page's poll.

import * as model from './model.js';
import * as views from './views.js';

/** How often the open run is re-fetched while the tab is visible, so a live run updates (ms). */
const AUTO_REFRESH_MS = 15000;

/** How soon a run still being read (202) is asked for again (ms). */
const LOADING_POLL_MS = 1000;

/** How often the Now panel of a running run is refreshed (ms). */
const NOW_REFRESH_MS = 3000;

/** Height of a chart that has no data (it only says why). */
const EMPTY_CHART_PX = 150;
const DEFAULT_CHART_PX = 380;

const state = {
  /** @type {string[]} */ runs: [],
  /** @type {import('./model.js').Figures} the charts of a run and of a comparison (from /figures) */
  figures: {views: [], compare: []},
  /** @type {string|null} */ run: null,
  /** @type {string|null} the second run of compare mode, or null */ compare: null,
  /** Incremented on every load; a response for an older generation is dropped. */
  generation: 0,
  /** What the page shows ("run:NAME" or "compare:A\nB"), to update it in place. */
  layout: '',
  /** JSON of the data on screen, to skip redrawing an unchanged one. */
  shown: '',
  /** When the data on screen was last fetched (ms since epoch). */
  fetchedAt: 0,
  /** The timer of the Now panel's next refresh, or null. */
  nowTimer: null,
  /** The timer of the next ask for a run still being read, or null. */
  loadingTimer: null,
};

/** @type {Object<string, HTMLElement>} */
const dom = {};

export async function render() {
  const link = document.createElement('link');
  link.rel = 'stylesheet';
  link.href = './style.css';
  document.head.appendChild(link);

  dom.runPicker = views.h('span', {className: 'picker'});
  dom.comparePicker = views.h('span', {className: 'picker'});
  dom.status = views.h('span', {className: 'status', role: 'status'});
  dom.main = views.h('main', {className: 'overview'});
  const refresh = views.h('button', {className: 'refresh', type: 'button', onClick: () => reload(true)}, 'Refresh');
  document.body.appendChild(
    views.h('div', {className: 'tfdiag'}, views.h('div', {className: 'bar'}, dom.runPicker, dom.comparePicker, refresh, dom.status), dom.main),
  );

  await reload(false);
  setInterval(() => {
    if (document.visibilityState === 'visible') reload(true, {quiet: true});
  }, AUTO_REFRESH_MS);
  document.addEventListener('visibilitychange', () => {
    if (document.visibilityState === 'visible' && Date.now() - state.fetchedAt >= AUTO_REFRESH_MS) reload(true, {quiet: true});
  });
}

/**
 * Fetches the run list, then what is selected.
 * @param {boolean} force bypass the response cache
 * @param {{quiet?: boolean}=} options quiet: keep the current view while loading
 */
async function reload(force, {quiet = false} = {}) {
  const maxAgeMs = force ? 0 : undefined;
  let runs;
  try {
    [runs, state.figures] = await Promise.all([model.getRuns({maxAgeMs}), model.getFigureList()]);
  } catch (error) {
    showError(`Cannot list runs: ${error.message}`);
    return;
  }
  if (runs.join('\n') !== state.runs.join('\n') || !dom.runPicker.firstChild) {
    state.runs = runs;
    if (!runs.includes(state.run)) state.run = runs.length ? runs[0] : null;
    if (!runs.includes(state.compare) || state.compare === state.run) state.compare = null;
    drawPickers();
  }
  if (state.run === null) {
    state.layout = state.shown = '';
    dom.main.replaceChildren(views.message('No tfdiag runs under the logdir yet (a run is a directory holding plugins/tfdiag).'));
    return;
  }
  await show({force, quiet});
}

function drawPickers() {
  dom.runPicker.replaceChildren(views.runSelector(state.runs, state.run, (run) => select(run, state.compare === run ? null : state.compare)));
  const others = state.runs.filter((run) => run !== state.run);
  dom.comparePicker.replaceChildren(
    others.length
      ? views.runSelector(others, state.compare, (run) => select(state.run, run || null), {label: 'Compare with', className: 'compare-select', none: '(none)'})
      : '',
  );
}

function select(run, compare) {
  const pickers = run !== state.run;
  state.run = run;
  state.compare = compare;
  if (pickers) drawPickers();
  show({force: false, quiet: false});
}

/** Loads and draws the selection. Responses that arrive after another selection are dropped. */
async function show({force, quiet}) {
  const generation = ++state.generation;
  const {run, compare} = state;
  const current = () => generation === state.generation && state.run === run && state.compare === compare;
  const maxAgeMs = force ? 0 : undefined;
  const layout = compare ? `compare:${run}\n${compare}` : `run:${run}`;
  if (!quiet) {
    dom.status.textContent = compare ? `Loading ${run} and ${compare}…` : `Loading ${run}…`;
    if (state.layout !== layout) dom.main.replaceChildren(views.message('Loading…'));
  }
  let data;
  try {
    data = compare
      ? await Promise.all([model.getComparison(run, compare, {maxAgeMs}), model.getReport(run, {maxAgeMs}), model.getReport(compare, {maxAgeMs})])
      : await Promise.all([model.getReport(run, {maxAgeMs}), model.getFaults(run, {maxAgeMs})]);
  } catch (error) {
    if (!current()) return;
    if (error instanceof model.LoadingError) {
      showProgress(error.progress);
      clearTimeout(state.loadingTimer);
      state.loadingTimer = setTimeout(() => current() && show({force: true, quiet: true}), LOADING_POLL_MS);
      return;
    }
    showError(`Cannot load ${compare ? `${run} and ${compare}` : run}: ${error.message}`);
    return;
  }
  if (!current()) return;
  if (!compare) refreshNow(run); // draws into the Now panel of the page drawn below
  state.fetchedAt = Date.now();
  dom.status.textContent = `Updated ${new Date().toLocaleTimeString()}`;
  const shown = JSON.stringify(data);
  if (layout === state.layout && shown === state.shown) return;
  const sameLayout = layout === state.layout;
  state.layout = layout;
  state.shown = shown;
  const charts = compare ? drawComparison(data, run, compare) : drawRun(data, sameLayout);
  // Charts are fetched anew (an ETag revalidation) only when the report changed.
  await Promise.all(charts.map(([box, chartRun, name]) => drawFigure(box, chartRun, name, {maxAgeMs: sameLayout ? 0 : maxAgeMs, current})));
}

/**
 * The single-run page: now, overview, findings, faults, views, workers. On an update of
 * the same run the text parts are rebuilt and the chart boxes (and the Now panel, which
 * refreshes on its own) are kept.
 * @return {Array<[HTMLElement, string, string]>} the charts to draw: [box, run, figure name]
 */
function drawRun([report, faults], sameLayout) {
  if (!sameLayout) {
    dom.now = views.h('div', {className: 'now-box'}, views.message('Loading the run\'s state…'));
    dom.faults = views.h('div', {className: 'faults-box'});
    dom.overview = views.h('div', {className: 'overview-box'});
    dom.findings = views.h('div', {className: 'findings-box'});
    dom.workers = views.h('div', {className: 'workers-box'});
    dom.charts = [];
    const sections = state.figures.views.map(([title, names]) => {
      const boxes = names.map((name) => views.chartBox(name));
      boxes.forEach((box, i) => dom.charts.push([box, state.run, names[i]]));
      return views.viewSection(title, boxes);
    });
    dom.main.replaceChildren(dom.now, dom.overview, dom.findings, dom.faults, ...sections, dom.workers);
  }
  dom.overview.replaceChildren(views.overviewView(report));
  dom.findings.replaceChildren(views.findingsView(report.findings || []));
  dom.faults.replaceChildren(views.faultsView(faults));
  dom.workers.replaceChildren(views.workersView(report.workers || []) || '');
  return dom.charts;
}

/**
 * Fetches and draws the Now panel of ``run``; while the run is running, again in
 * NOW_REFRESH_MS (skipped while the tab is hidden). Dropped if another page is shown meanwhile.
 */
async function refreshNow(run) {
  clearTimeout(state.nowTimer);
  const shown = () => state.run === run && !state.compare && dom.now && dom.now.isConnected;
  let now;
  try {
    now = await model.getNow(run);
  } catch (error) {
    if (!shown()) return;
    if (error instanceof model.LoadingError) { // a view saved by an earlier session is shown meanwhile
      dom.now.replaceChildren(views.message('Reading the run…', 'loading'));
      state.nowTimer = setTimeout(() => refreshNow(run), LOADING_POLL_MS);
      return;
    }
    dom.now.replaceChildren(views.message(`Cannot load the run's state: ${error.message}`, 'error'));
    return;
  }
  if (!shown()) return;
  dom.now.replaceChildren(views.nowView(now));
  clearTimeout(state.nowTimer);
  if (now.state === 'running') {
    state.nowTimer = setTimeout(() => (document.visibilityState === 'visible' ? refreshNow(run) : (state.nowTimer = null)), NOW_REFRESH_MS);
  }
}

/** The compare page: the comparison, then each run's overview and charts side by side. */
function drawComparison([comparison, baseReport, newReport], base, compare) {
  const column = (report, run) => {
    const boxes = state.figures.compare.map((name) => views.chartBox(name));
    boxes.forEach((box) => (box.dataset.run = run));
    return [views.h('div', {}, views.h('h2', {className: 'run-name'}, run), views.overviewView(report), boxes), boxes];
  };
  const [left, leftBoxes] = column(baseReport, base);
  const [right, rightBoxes] = column(newReport, compare);
  dom.main.replaceChildren(views.comparisonView(comparison), views.sideBySide(left, right));
  const names = state.figures.compare;
  return [...leftBoxes.map((box, i) => [box, base, names[i]]), ...rightBoxes.map((box, i) => [box, compare, names[i]])];
}

async function drawFigure(box, run, name, {maxAgeMs, current}) {
  const element = box.querySelector('.chart-plot');
  try {
    const [Plotly, figure] = await Promise.all([model.loadPlotly(), model.getFigure(run, name, {maxAgeMs})]);
    if (!current() || !element.isConnected) return;
    const drawable = model.drawableFigure(figure, model.hasWebGL());
    const empty = model.isEmptyFigure(figure);
    box.classList.toggle('empty', empty);
    box.dataset.state = empty ? 'empty' : 'drawn';
    element.style.height = `${empty ? EMPTY_CHART_PX : drawable.layout.height || DEFAULT_CHART_PX}px`;
    const layout = {...drawable.layout, height: undefined, autosize: true};
    await Plotly.react(element, drawable.data, layout, {responsive: true, displaylogo: false});
  } catch (error) {
    if (error instanceof model.LoadingError && current() && element.isConnected) {
      box.dataset.state = 'loading'; // a chart the saved view lacks: drawn once the run is read
      setTimeout(() => current() && element.isConnected && drawFigure(box, run, name, {maxAgeMs: 0, current}), LOADING_POLL_MS);
      return;
    }
    if (current() && element.isConnected) {
      box.dataset.state = 'error';
      element.replaceChildren(views.message(`Cannot draw the chart: ${error.message}`, 'error'));
    }
  }
}

/** A run still being read: how far its read is (the page is drawn when it is done). */
function showProgress(progress) {
  const files = progress.files ? ` ${progress.files_read.toLocaleString()} of ${progress.files.toLocaleString()} task files` : '';
  const bytes = progress.bytes ? ` (${(progress.bytes_read / 1e6).toFixed(1)} of ${(progress.bytes / 1e6).toFixed(1)} MB)` : '';
  const text = progress.stage === 'analysing' ? `Analysing ${progress.run}…` : `Reading ${progress.run}:${files}${bytes}…`;
  dom.status.textContent = text;
  state.layout = state.shown = '';
  dom.main.replaceChildren(views.message(text, 'loading'));
}

function showError(text) {
  dom.status.textContent = '';
  state.layout = state.shown = '';
  dom.main.replaceChildren(views.message(text, 'error'));
}
