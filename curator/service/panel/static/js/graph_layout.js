// A force-directed layout in plain JavaScript, sized for a few thousand nodes: repulsion only between nodes in
// neighbouring cells of a uniform grid (far nodes barely push each other, so skipping them keeps each step
// near-linear), springs along edges, a weak pull to the centre so separate components stay on screen, and a
// cooling step limit. It runs a fixed iteration budget in slices, yielding to the browser between slices, so a
// large graph never freezes the page; `onSlice` lets the view draw the layout as it settles.

const IDEAL = 30; // the spring length, in layout units

export function initialPositions(count) {
  // A sunflower spiral: evenly spread and deterministic (the same graph opens the same way every time).
  const x = new Float32Array(count);
  const y = new Float32Array(count);
  const golden = Math.PI * (3 - Math.sqrt(5));
  for (let i = 0; i < count; i++) {
    const r = IDEAL * 0.9 * Math.sqrt(i + 0.5);
    x[i] = r * Math.cos(i * golden);
    y[i] = r * Math.sin(i * golden);
  }
  return { x, y };
}

export function iterationBudget(count) {
  // Fewer steps for big graphs: their grid keeps a step cheap, but the total must stay around a second or less.
  if (count <= 300) return 400;
  if (count <= 1500) return 300;
  return 220;
}

/**
 * Lay out `count` nodes joined by `links` (pairs of indexes, flat Int32Array [s0, t0, s1, t1, ...]).
 * Returns a promise of {x, y, iterations, ms, longestSliceMs}; `pinned[i]` nodes do not move.
 */
export async function layout(count, links, options = {}) {
  const { onSlice, sliceMs = 12, pinned = null, positions = null } = options;
  const iterations = options.iterations ?? iterationBudget(count);
  const { x, y } = positions || initialPositions(count);
  const dx = new Float32Array(count);
  const dy = new Float32Array(count);
  const degree = new Uint16Array(count);
  for (let k = 0; k < links.length; k++) degree[links[k]]++;
  const cell = IDEAL * 3; // repulsion reaches one cell around a node
  const started = performance.now();
  let longest = 0;
  let done = 0;
  let temperature = IDEAL * 4;
  const cooling = temperature / (iterations + 1);
  const grid = new Map();
  while (done < iterations) {
    const sliceStart = performance.now();
    do {
      step(count, links, x, y, dx, dy, degree, pinned, grid, cell, temperature);
      temperature = Math.max(temperature - cooling, 0.5);
      done++;
    } while (done < iterations && performance.now() - sliceStart < sliceMs);
    longest = Math.max(longest, performance.now() - sliceStart);
    if (onSlice) onSlice(done, iterations);
    if (done < iterations) await new Promise((resolve) => setTimeout(resolve, 0));
  }
  return { x, y, iterations: done, ms: performance.now() - started, longestSliceMs: longest };
}

function step(count, links, x, y, dx, dy, degree, pinned, grid, cell, temperature) {
  dx.fill(0);
  dy.fill(0);
  // 1. bucket nodes by grid cell
  grid.clear();
  for (let i = 0; i < count; i++) {
    const key = cellKey(Math.floor(x[i] / cell), Math.floor(y[i] / cell));
    const bucket = grid.get(key);
    if (bucket) bucket.push(i); else grid.set(key, [i]);
  }
  // 2. repulsion inside each cell and with the neighbouring cells (each pair once)
  const k2 = IDEAL * IDEAL;
  const reach2 = cell * cell;
  for (const [key, bucket] of grid) {
    const cx = Math.floor(key / 65536) - 32768;
    const cy = (key % 65536) - 32768;
    for (let ox = -1; ox <= 1; ox++) {
      for (let oy = -1; oy <= 1; oy++) {
        const otherKey = cellKey(cx + ox, cy + oy);
        if (otherKey < key) continue; // the pair of cells is handled once, from the smaller key
        const other = grid.get(otherKey);
        if (!other) continue;
        const same = otherKey === key;
        for (let a = 0; a < bucket.length; a++) {
          const i = bucket[a];
          for (let b = same ? a + 1 : 0; b < other.length; b++) {
            const j = other[b];
            let ddx = x[i] - x[j];
            let ddy = y[i] - y[j];
            let d2 = ddx * ddx + ddy * ddy;
            if (d2 > reach2) continue;
            if (d2 < 0.01) { ddx = (i - j) * 0.1 + 0.1; ddy = 0.1; d2 = ddx * ddx + ddy * ddy; }
            const force = k2 / d2; // (k² / d) along the unit vector
            dx[i] += ddx * force; dy[i] += ddy * force;
            dx[j] -= ddx * force; dy[j] -= ddy * force;
          }
        }
      }
    }
  }
  // 3. springs along edges (d² / k, divided by degree so hubs do not collapse their neighbourhood)
  for (let e = 0; e < links.length; e += 2) {
    const s = links[e];
    const t = links[e + 1];
    const ddx = x[s] - x[t];
    const ddy = y[s] - y[t];
    const d = Math.sqrt(ddx * ddx + ddy * ddy) || 0.01;
    const force = d / IDEAL;
    const fs = force / Math.max(1, Math.sqrt(degree[s]));
    const ft = force / Math.max(1, Math.sqrt(degree[t]));
    dx[s] -= ddx * fs; dy[s] -= ddy * fs;
    dx[t] += ddx * ft; dy[t] += ddy * ft;
  }
  // 4. gravity and a move limited by the temperature
  const gravity = 0.02;
  for (let i = 0; i < count; i++) {
    if (pinned && pinned[i]) continue;
    const fx = dx[i] - x[i] * gravity;
    const fy = dy[i] - y[i] * gravity;
    const len = Math.sqrt(fx * fx + fy * fy);
    if (len > 0) {
      const move = Math.min(len, temperature) / len;
      x[i] += fx * move;
      y[i] += fy * move;
    }
  }
}

function cellKey(cx, cy) {
  return (cx + 32768) * 65536 + (cy + 32768);
}
