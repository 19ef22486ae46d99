// The flame graph view: draws the call tree on a canvas (only frames at
// least MIN_WIDTH pixels wide, so a profile of any size draws quickly),
// and keeps the view state (search, transforms, reversal, zoom) in the
// controls and the URL fragment (a report's, for the report's frames).
// Names go to the canvas or textContent only.

const ROW = 16;
const MIN_WIDTH = 0.4;
/** Per kind digit (kind.rs): a label, a hue range and saturation, lightness. */
const KINDS = [
  ['native', 0, 20, 75, 62],
  ['kernel', 26, 40, 85, 55],
  ['Java JIT', 95, 125, 55, 50],
  ['Java inlined', 172, 190, 60, 48],
  ['Java interpreted', 48, 58, 80, 55],
  ['container / service', 268, 285, 45, 66],
  ['process', 208, 222, 60, 66],
  ['thread', 192, 204, 35, 76],
  ['Python', 300, 318, 50, 66],
];
const VIEW_KEYS = ['search', 'keep', 'remove', 'replace', 'with', 'collapse', 'reversed', 'before', 'zoom'];
const CHECKBOX_KEYS = ['collapse', 'reversed', 'before'];
const TRANSFORM_KEYS = ['keep', 'remove', 'replace', 'with', 'collapse', 'reversed'];

/** Milliseconds each step of the first draw took, for the curious and for tests. */
const timings = { start: performance.now() };
const data = JSON.parse(document.getElementById('stoke-data').textContent);
timings.parse = performance.now() - timings.start;
/** The stacks, decoded when a transform or the reversed view first needs them. */
let base = null;
const dataTotal = data.nodes.reduce((sum, value, i) => (i % 3 === 2 ? sum + value : sum), 0);
const canvas = document.getElementById('canvas');
const tooltip = document.getElementById('tooltip');
const element = (id) => document.getElementById(id);

let view = { search: '', keep: '', remove: '', replace: '', with: '', collapse: false, reversed: false, zoom: [] };
let tree = null;
let zoom = 0;
let search = { matched: new Uint8Array(0), samples: 0 };
let errors = [];
/** What the last draw drew: per frame its node and its box, in CSS pixels. */
let boxes = [];
let renders = 0;
let firstDrawMs = null;

function hash(text) {
  let h = 2166136261;
  for (let i = 0; i < text.length; i++) h = Math.imul(h ^ text.charCodeAt(i), 16777619);
  return (h >>> 0) / 4294967296;
}

/** In a diff, how much a node changed: -1 (gone) to 1 (new), 0 if the same. */
function change(node) {
  const after = tree.total[node];
  const before = tree.before[node];
  const most = Math.max(after, before);
  return most > 0 ? (after - before) / most : 0;
}

function colour(node) {
  if (node === 0) return 'hsl(0, 0%, 82%)';
  if (search.matched[node]) return 'hsl(305, 85%, 62%)';
  if (tree.before) {
    // Red grew, blue shrank, the more the deeper; white stayed the same.
    const c = change(node);
    return `hsl(${c >= 0 ? 0 : 220}, 80%, ${Math.round(93 - 43 * Math.min(Math.abs(c), 1))}%)`;
  }
  const name = tree.names[tree.name[node]];
  const [, from, to, saturation, lightness] = KINDS[tree.kinds[tree.name[node]]] || KINDS[0];
  const h = hash(name);
  return `hsl(${from + (to - from) * h}, ${saturation}%, ${lightness + 8 * (h - 0.5)}%)`;
}

function frameName(node) {
  return node === 0 ? 'all' : tree.names[tree.name[node]];
}

function percent(part, whole) {
  return whole > 0 ? `${((100 * part) / whole).toFixed(2)}%` : '0%';
}

/** Draws the tree with `zoom` spanning the full width. */
/**
 * How wide a node is drawn: its samples, or in a diff sized by BEFORE, its
 * BEFORE samples (scaled), where frames gone since have their width.
 */
function widthOf(node) {
  return view.before && tree.before ? tree.before[node] : tree.total[node];
}

function draw() {
  const drawStarted = performance.now();
  // What the tooltip showed may not be drawn any more.
  tooltip.hidden = true;
  const width = Math.max(canvas.parentElement.clientWidth - 24, 100);
  const height = (tree.maxDepth + 1) * ROW;
  const ratio = window.devicePixelRatio || 1;
  canvas.width = Math.round(width * ratio);
  canvas.height = Math.round(height * ratio);
  canvas.style.height = `${height}px`;
  const ctx = canvas.getContext('2d');
  ctx.scale(ratio, ratio);
  ctx.font = '12px sans-serif';
  ctx.textBaseline = 'middle';
  const charWidth = ctx.measureText('abcdefghijklmnopqrstuvwxyz_ABCDEF').width / 32;
  const left = offsetOf(tree, zoom, widthOf);
  const span = widthOf(zoom);
  const scale = span > 0 ? width / span : 0;
  boxes = [];
  const pending = [0, 0];
  while (pending.length > 0) {
    const x = pending.pop();
    const node = pending.pop();
    const total = widthOf(node);
    if (x + total <= left || x >= left + span) continue;
    const from = Math.max((x - left) * scale, 0);
    const to = Math.min((x + total - left) * scale, width);
    if (to - from < Math.max(MIN_WIDTH, (width * data.minwidth) / 100)) continue;
    const depth = tree.depth[node];
    const y = view.reversed ? depth * ROW : height - (depth + 1) * ROW;
    ctx.fillStyle = colour(node);
    ctx.fillRect(from, y, Math.max(to - from - 0.5, 0.5), ROW - 1);
    const chars = Math.floor((to - from - 6) / charWidth);
    if (chars >= 3) {
      const name = frameName(node);
      ctx.fillStyle = '#000';
      ctx.fillText(name.length > chars ? `${name.slice(0, chars - 2)}..` : name, from + 3, y + ROW / 2);
    }
    boxes.push({ node, x: from, y, width: to - from });
    let childX = x;
    for (const child of childrenOf(tree, node)) {
      pending.push(child, childX);
      childX += widthOf(child);
    }
  }
  renders++;
  if (firstDrawMs === null) {
    firstDrawMs = performance.now();
    timings.draw = firstDrawMs - drawStarted;
    // For tools that read the page's DOM (the bench, with --dump-dom).
    document.documentElement.dataset.firstDrawMs = String(Math.round(firstDrawMs));
    // One deep stack makes the graph taller than the window: its roots,
    // where the wide frames are, are shown first.
    const bottom = canvas.getBoundingClientRect().bottom;
    if (!view.reversed && bottom > window.innerHeight) {
      window.scrollBy(0, bottom - window.innerHeight);
    }
  }
  showStatus();
}

function showStatus() {
  const all = tree.total[0];
  let totals = dataTotal === 0 ? 'No samples were recorded.' : `${all} ${data.unit}`;
  if (all !== dataTotal) totals += ' after transforms';
  if (zoom !== 0) totals += `; zoomed on ${frameName(zoom)}: ${tree.total[zoom]} (${percent(tree.total[zoom], all)})`;
  element('totals').textContent = totals;
  element('matched').textContent = view.search ? `Matched: ${search.samples} ${data.unit} (${percent(search.samples, all)})` : '';
  element('error').textContent = errors.join('; ');
}

function boxAt(event) {
  const bounds = canvas.getBoundingClientRect();
  const x = event.clientX - bounds.left;
  const y = event.clientY - bounds.top;
  return boxes.find((box) => x >= box.x && x < box.x + box.width && y >= box.y && y < box.y + ROW);
}

function diffLine(node) {
  const before = Math.round(tree.before[node] * 100) / 100;
  const delta = tree.total[node] - tree.before[node];
  const sign = delta >= 0 ? '+' : '';
  const relative = tree.before[node] > 0 ? ` (${sign}${percent(delta, tree.before[node])})` : ' (new)';
  return `before: ${before} samples (scaled), after: ${tree.total[node]}, change ${sign}${Math.round(delta * 100) / 100}${relative}`;
}

/** A diff's table of the frames that changed most, as the page data lists them. */
function changesTable() {
  const table = element('changes');
  if (!data.changes) return;
  table.hidden = false;
  for (const change of data.changes) {
    const row = table.tBodies[0].insertRow();
    const delta = change.after - change.before;
    const cells = [change.name, change.before, change.after, `${delta >= 0 ? '+' : ''}${Math.round(delta * 100) / 100}`];
    for (const text of cells) row.insertCell().textContent = text;
    row.className = delta >= 0 ? 'grew' : 'shrank';
  }
}

function showTooltip(event) {
  const box = boxAt(event);
  if (!box) {
    tooltip.hidden = true;
    return;
  }
  const node = box.node;
  const parent = tree.parent[node];
  const kind = node === 0 ? 'all stacks' : (KINDS[tree.kinds[tree.name[node]]] || KINDS[0])[0];
  tooltip.textContent = [
    frameName(node),
    `${kind}`,
    `${tree.total[node]} ${data.unit}, ${percent(tree.total[node], tree.total[0])} of all`,
    parent >= 0 ? `${percent(tree.total[node], tree.total[parent])} of ${frameName(parent)}` : '',
    `self: ${tree.self[node]} ${data.unit}`,
    tree.before ? diffLine(node) : '',
  ].filter(Boolean).join('\n');
  tooltip.hidden = false;
  tooltip.style.left = `${Math.min(event.clientX + 12, window.innerWidth - tooltip.offsetWidth - 4)}px`;
  tooltip.style.top = `${event.clientY + 14}px`;
}

/** Rebuilds the tree from the transforms, then searches and draws. */
function rebuild() {
  const started = performance.now();
  if (TRANSFORM_KEYS.some((key) => view[key] && key !== 'with')) {
    base = base || decodeStacks(data);
    const stacks = transformStacks(base, view);
    tree = buildTree(stacks, view.reversed);
    errors = stacks.errors;
  } else {
    tree = treeFromData(data);
    errors = [];
  }
  timings.tree = timings.tree ?? performance.now() - started;
  zoom = nodeAt(tree, view.zoom);
  research();
}

function research() {
  const searchErrors = [];
  const pattern = regex(view.search, '', 'Search', searchErrors);
  search = searchTree(tree, pattern);
  errors = errors.filter((error) => !error.startsWith('Search')).concat(searchErrors);
  draw();
}

/**
 * Where the view is kept: in the page's URL fragment, or, for a frame of a
 * `stoke report` (about:srcdoc, whose history refuses any fragment), in the
 * report's, under the frame's id, so that the report's URL shares it too.
 * Null in a frame of another origin: the view works but is not kept.
 */
function viewHome() {
  if (location.href !== 'about:srcdoc') return { window, key: null };
  const frame = window.frameElement;
  return frame && frame.id ? { window: parent, key: frame.id } : null;
}
const home = viewHome();

/** The fragment of the page that keeps the view, as parameters. */
function homeFragment() {
  return new URLSearchParams(home ? home.window.location.hash.slice(1) : '');
}

function saveView() {
  if (!home) return;
  const params = new URLSearchParams();
  for (const key of VIEW_KEYS) {
    const value = view[key];
    if (key === 'zoom') {
      if (value.length > 0) params.set(key, value.join(';'));
    } else if (value === true) {
      params.set(key, '1');
    } else if (value === false && key === 'reversed' && data.reversed) {
      // Off where the page opens with it on (--reverse).
      params.set(key, '0');
    } else if (value) {
      params.set(key, value);
    }
  }
  let fragment = params;
  if (home.key) {
    fragment = homeFragment();
    if (params.toString()) fragment.set(home.key, params);
    else fragment.delete(home.key);
  }
  try {
    home.window.history.replaceState(null, '', `#${fragment}`);
  } catch {
    // The view is drawn already: a history that refuses the URL only leaves it unshared.
  }
}

function loadView() {
  const fragment = homeFragment();
  const params = home && home.key ? new URLSearchParams(fragment.get(home.key) || '') : fragment;
  for (const key of VIEW_KEYS) {
    const value = params.get(key) || '';
    if (key === 'zoom') view.zoom = value ? value.split(';') : [];
    else if (CHECKBOX_KEYS.includes(key)) view[key] = params.has(key) ? value === '1' : key === 'reversed' && data.reversed;
    else view[key] = value;
    const input = element(key);
    if (!input) continue;
    if (input.type === 'checkbox') input.checked = view[key];
    else input.value = view[key];
  }
}

function setZoom(node) {
  zoom = node;
  view.zoom = pathOf(tree, node);
  draw();
  saveView();
}

let pendingInput = null;
function onInput(event) {
  const key = event.target.id;
  view[key] = event.target.type === 'checkbox' ? event.target.checked : event.target.value;
  clearTimeout(pendingInput);
  // Transforms of a large profile take a moment: wait for typing to pause.
  pendingInput = setTimeout(() => {
    if (TRANSFORM_KEYS.includes(key)) rebuild();
    else research();
    saveView();
  }, event.target.type === 'checkbox' ? 0 : 150);
}

function legend() {
  if (data.before) {
    for (const [label, colour] of [['grew', 'hsl(0, 80%, 60%)'], ['shrank', 'hsl(220, 80%, 60%)'], ['same', 'hsl(0, 80%, 93%)']]) {
      const item = document.createElement('span');
      const swatch = document.createElement('i');
      swatch.style.background = colour;
      item.append(swatch, label);
      element('legend').append(item);
    }
    return;
  }
  const used = new Set(Array.from(data.kinds, Number));
  const list = element('legend');
  KINDS.forEach(([label, from, to, saturation, lightness], digit) => {
    if (!used.has(digit)) return;
    const item = document.createElement('span');
    const swatch = document.createElement('i');
    swatch.style.background = `hsl(${(from + to) / 2}, ${saturation}%, ${lightness}%)`;
    item.append(swatch, label);
    list.append(item);
  });
}

element('title').textContent = data.title;
element('subtitle').textContent = data.subtitle;
document.title = data.title;
legend();
changesTable();
for (const key of VIEW_KEYS) element(key)?.addEventListener(CHECKBOX_KEYS.includes(key) ? 'change' : 'input', onInput);
element('before-control').hidden = !data.before;
element('controls').addEventListener('submit', (event) => event.preventDefault());
element('reset').addEventListener('click', () => setZoom(0));
canvas.addEventListener('click', (event) => {
  const box = boxAt(event);
  if (box) setZoom(box.node);
});
canvas.addEventListener('mousemove', showTooltip);
canvas.addEventListener('mouseleave', () => {
  tooltip.hidden = true;
});
window.addEventListener('resize', draw);
(home ? home.window : window).addEventListener('hashchange', () => {
  loadView();
  rebuild();
});
loadView();
rebuild();

/** What the page shows, for tests and for scripting the page. */
window.stoke = {
  /** Milliseconds from navigation to the end of the first draw. */
  firstDrawMs,
  timings,
  renders: () => renders,
  view: () => JSON.parse(JSON.stringify(view)),
  state: () => ({
    total: tree.total[0],
    matched: search.samples,
    matchedText: element('matched').textContent,
    zoom: pathOf(tree, zoom),
    zoomTotal: tree.total[zoom],
    nodes: tree.size,
    errors,
    canvasWidth: boxes.length > 0 ? boxes[0].width : 0,
  }),
  /** The frames drawn with exactly this name: box, samples, search match. */
  frames: (name) =>
    boxes
      .filter((box) => frameName(box.node) === name)
      .map((box) => ({
        x: box.x,
        y: box.y,
        width: box.width,
        depth: tree.depth[box.node],
        samples: tree.total[box.node],
        before: tree.before ? tree.before[box.node] : null,
        matched: search.matched[box.node] === 1,
        colour: colour(box.node),
      })),
  /** The distinct frame names in the tree. */
  names: () => [...new Set(Array.from(tree.name.subarray(1, tree.size), (name) => tree.names[name]))],
};
