// The profile model of the flame graph page: the stacks the page was given,
// the transforms the user asks for, and the call tree that gets drawn.
// Names are only ever compared and passed on as text, never parsed as markup.

/**
 * The stacks of the page data (a prefix tree in preorder, three numbers a
 * node: depth, name, samples ending there) as flat arrays: the frames of
 * stack s, root first, are frames[starts[s]] .. frames[starts[s + 1] - 1].
 */
function decodeStacks(data) {
  const nodes = data.nodes;
  let stackCount = 0;
  let frameCount = 0;
  for (let i = 0; i < nodes.length; i += 3) {
    if (nodes[i + 2] > 0 || (data.before && data.before[i / 3] > 0)) {
      stackCount++;
      frameCount += nodes[i] + 1;
    }
  }
  const frames = new Int32Array(frameCount);
  const starts = new Int32Array(stackCount + 1);
  const counts = new Float64Array(stackCount);
  // A diff's BEFORE samples, scaled, per stack.
  const before = data.before ? new Float64Array(stackCount) : null;
  const path = [];
  let s = 0;
  let f = 0;
  for (let i = 0; i < nodes.length; i += 3) {
    const depth = nodes[i];
    path.length = depth;
    path.push(nodes[i + 1]);
    if (nodes[i + 2] > 0 || (before && data.before[i / 3] > 0)) {
      starts[s] = f;
      for (let d = 0; d <= depth; d++) frames[f++] = path[d];
      if (before) before[s] = data.before[i / 3];
      counts[s++] = nodes[i + 2];
    }
  }
  starts[s] = f;
  return { names: data.names, kinds: Array.from(data.kinds, Number), frames, starts, counts, before };
}

/** `source` as a regular expression, or null if empty; a bad one is reported in `errors`. */
function regex(source, flags, what, errors) {
  if (!source) return null;
  try {
    return new RegExp(source, flags);
  } catch (e) {
    errors.push(`${what}: ${e.message}`);
    return null;
  }
}

/**
 * The stacks of `base` transformed as `view` says, in this order: frame
 * names rewritten (`replace` by `with`), only stacks with a frame matching
 * `keep` kept, frames matching `remove` dropped, recursion folded
 * (`collapse`, see [foldRepeat]). Bad regular expressions are skipped and
 * listed in `errors`.
 */
function transformStacks(base, view) {
  const errors = [];
  const replace = regex(view.replace, 'g', 'Replace', errors);
  const keep = regex(view.keep, '', 'Keep', errors);
  const remove = regex(view.remove, '', 'Remove', errors);
  let names = base.names;
  let kinds = base.kinds;
  let renamed = null;
  if (replace) {
    const index = new Map();
    names = [];
    kinds = [];
    renamed = new Int32Array(base.names.length);
    base.names.forEach((name, i) => {
      const next = name.replace(replace, view.with);
      let j = index.get(next);
      if (j === undefined) {
        j = names.length;
        index.set(next, j);
        names.push(next);
        kinds.push(base.kinds[i]);
      }
      renamed[i] = j;
    });
  }
  if (!renamed && !keep && !remove && !view.collapse) {
    return { ...base, errors };
  }
  const kept = keep ? names.map((name) => keep.test(name)) : null;
  const removed = remove ? names.map((name) => remove.test(name)) : null;
  const frames = new Int32Array(base.frames.length);
  const starts = [0];
  const counts = [];
  const before = base.before ? [] : null;
  const stack = [];
  for (let s = 0; s + 1 < base.starts.length; s++) {
    stack.length = 0;
    let keepIt = !kept;
    for (let f = base.starts[s]; f < base.starts[s + 1]; f++) {
      const name = renamed ? renamed[base.frames[f]] : base.frames[f];
      keepIt = keepIt || kept[name];
      if (removed && removed[name]) continue;
      stack.push(name);
      if (view.collapse) foldRepeat(stack);
    }
    if (!keepIt || stack.length === 0) continue;
    let f = starts[starts.length - 1];
    for (const name of stack) frames[f++] = name;
    starts.push(f);
    counts.push(base.counts[s]);
    if (before) before.push(base.before[s]);
  }
  return { names, kinds, frames, starts, counts, before, errors };
}

/** Longest cycle of indirect recursion [foldRepeat] folds, in frames. */
const MAX_CYCLE = 16;

/**
 * Folds recursion at the top of `stack`, just pushed to: where its last k
 * frames repeat the k before them (`rec;rec` for k = 1, `eval;apply;eval;apply`
 * for 2), the repeat is dropped, so a recursion of any depth shows as one
 * round of it and the frames it calls sit right above. Frames in between
 * that differ (`a;b;a;c`) are a call path, not a repeat, and stay. The
 * stack had no repeat at its top before the push, and a fold leaves it as
 * it was before one: one fold at most.
 */
function foldRepeat(stack) {
  const length = stack.length;
  for (let k = 1; k <= MAX_CYCLE && 2 * k <= length; k++) {
    if (stack[length - 1 - k] !== stack[length - 1]) continue;
    let same = true;
    for (let i = 2; i <= k && same; i++) same = stack[length - i - k] === stack[length - i];
    if (same) {
      stack.length = length - k;
      return;
    }
  }
}

/** Children a node may have before they get a map from name to child. */
const SCAN_CHILDREN = 8;

/**
 * An empty call tree with room for `capacity` nodes, node 0 its root, "all".
 * Children are linked lists (firstChild, nextSibling), sorted by name only
 * when drawn ([childrenOf]): a large profile has millions of nodes and a
 * draw looks at a few thousand.
 */
function emptyTree(names, kinds, capacity, diff) {
  const tree = {
    // A diff's BEFORE samples (scaled) under each node, as `total` has AFTER's.
    before: diff ? new Float64Array(capacity) : null,
    names,
    kinds,
    size: 1,
    name: new Int32Array(capacity),
    parent: new Int32Array(capacity),
    depth: new Int32Array(capacity),
    total: new Float64Array(capacity),
    self: new Float64Array(capacity),
    firstChild: new Int32Array(capacity).fill(-1),
    nextSibling: new Int32Array(capacity).fill(-1),
    sorted: new Map(),
    maxDepth: 0,
  };
  tree.name[0] = -1;
  tree.parent[0] = -1;
  return tree;
}

/** Adds a child named `name` under `node` and returns it. */
function addChild(tree, node, name) {
  const child = tree.size++;
  tree.name[child] = name;
  tree.parent[child] = node;
  tree.depth[child] = tree.depth[node] + 1;
  tree.nextSibling[child] = tree.firstChild[node];
  tree.firstChild[node] = child;
  if (tree.depth[child] > tree.maxDepth) tree.maxDepth = tree.depth[child];
  return child;
}

/** The call tree of the page data as it is: its prefix tree, read once. */
function treeFromData(data) {
  const nodes = data.nodes;
  const tree = emptyTree(data.names, Array.from(data.kinds, Number), nodes.length / 3 + 1, !!data.before);
  const path = [0];
  for (let i = 0; i < nodes.length; i += 3) {
    const depth = nodes[i];
    const child = addChild(tree, path[depth], nodes[i + 1]);
    tree.self[child] = tree.total[child] = nodes[i + 2];
    if (tree.before) tree.before[child] = data.before[i / 3];
    path[depth + 1] = child;
  }
  // Children come after their parents: add totals up from the end.
  for (let n = tree.size - 1; n > 0; n--) {
    tree.total[tree.parent[n]] += tree.total[n];
    if (tree.before) tree.before[tree.parent[n]] += tree.before[n];
  }
  return tree;
}

/**
 * The call tree of `stacks`, callers above callees, or with `reversed`
 * callees above callers (leaf functions at the top).
 */
function buildTree(stacks, reversed) {
  const tree = emptyTree(stacks.names, stacks.kinds, stacks.frames.length + 1, !!stacks.before);
  const childCount = new Int32Array(tree.name.length);
  // Children by name, for the nodes with many.
  const lookup = new Map();
  const child = (node, name) => {
    const count = childCount[node];
    if (count > SCAN_CHILDREN) {
      const found = lookup.get(node).get(name);
      if (found !== undefined) return found;
    } else {
      for (let c = tree.firstChild[node]; c >= 0; c = tree.nextSibling[c]) {
        if (tree.name[c] === name) return c;
      }
    }
    const added = addChild(tree, node, name);
    childCount[node] = count + 1;
    if (count + 1 === SCAN_CHILDREN + 1) {
      const byName = new Map();
      for (let c = added; c >= 0; c = tree.nextSibling[c]) byName.set(tree.name[c], c);
      lookup.set(node, byName);
    } else if (count + 1 > SCAN_CHILDREN) {
      lookup.get(node).set(name, added);
    }
    return added;
  };
  // Consecutive stacks often share their first frames: reuse that path.
  const path = [0];
  const previous = [];
  for (let s = 0; s + 1 < stacks.starts.length; s++) {
    const start = stacks.starts[s];
    const end = stacks.starts[s + 1];
    const count = stacks.counts[s];
    const length = end - start;
    let shared = 0;
    while (shared < length && shared < previous.length) {
      const name = stacks.frames[reversed ? end - 1 - shared : start + shared];
      if (name !== previous[shared]) break;
      shared++;
    }
    path.length = shared + 1;
    previous.length = shared;
    let node = path[shared];
    for (let d = shared; d < length; d++) {
      const name = stacks.frames[reversed ? end - 1 - d : start + d];
      node = child(node, name);
      path.push(node);
      previous.push(name);
    }
    for (let i = 0; i < path.length; i++) tree.total[path[i]] += count;
    if (tree.before) for (let i = 0; i < path.length; i++) tree.before[path[i]] += stacks.before[s];
    tree.self[node] += count;
  }
  return tree;
}

/** The children of `node`, sorted by name as flame graphs draw them. */
function childrenOf(tree, node) {
  let children = tree.sorted.get(node);
  if (children === undefined) {
    children = [];
    for (let c = tree.firstChild[node]; c >= 0; c = tree.nextSibling[c]) children.push(c);
    const names = tree.names;
    children.sort((a, b) => {
      const x = names[tree.name[a]];
      const y = names[tree.name[b]];
      return x < y ? -1 : x > y ? 1 : 0;
    });
    tree.sorted.set(node, children);
  }
  return children;
}

/** The names from the root down to `node`, excluding the root. */
function pathOf(tree, node) {
  const path = [];
  for (let n = node; n > 0; n = tree.parent[n]) path.push(tree.names[tree.name[n]]);
  return path.reverse();
}

/** The node at the end of `path` (names from the root down), or 0 if there is none. */
function nodeAt(tree, path) {
  let node = 0;
  for (const name of path) {
    const next = childrenOf(tree, node).find((child) => tree.names[tree.name[child]] === name);
    if (next === undefined) return 0;
    node = next;
  }
  return node;
}

/**
 * Where `node` starts from the left edge of the whole graph, measured by
 * `widthOf` (samples, or a diff's BEFORE samples).
 */
function offsetOf(tree, node, widthOf) {
  let x = 0;
  for (let n = node; n > 0; n = tree.parent[n]) {
    for (const sibling of childrenOf(tree, tree.parent[n])) {
      if (sibling === n) break;
      x += widthOf(sibling);
    }
  }
  return x;
}

/**
 * Per node, whether its name matches `search`, and the samples under the
 * matching nodes that have no matching caller (each sample counted once).
 */
function searchTree(tree, search) {
  const matched = new Uint8Array(tree.size);
  if (!search) return { matched, samples: 0 };
  const names = tree.names.map((name) => search.test(name));
  let samples = 0;
  // Nodes are created after their parents, so one pass in order sees
  // every caller first.
  const under = new Uint8Array(tree.size);
  for (let n = 1; n < tree.size; n++) {
    matched[n] = names[tree.name[n]] ? 1 : 0;
    const callerMatched = under[tree.parent[n]];
    if (matched[n] && !callerMatched) samples += tree.total[n];
    under[n] = callerMatched || matched[n];
  }
  return { matched, samples };
}
