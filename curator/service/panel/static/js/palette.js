// Node colours by type: a fixed palette readable on both themes, assigned in the order the types are listed.

const PALETTE = ["#4e9af1", "#f28e2b", "#59a14f", "#e15759", "#b07aa1", "#76b7b2", "#edc948", "#ff9da7",
  "#9c755f", "#8cd17d", "#d37295", "#a0cbe8", "#86bcb6", "#f1ce63", "#bab0ac"];

export function colourFor(type, types) {
  const i = types.indexOf(type);
  return PALETTE[(i < 0 ? hash(type) : i) % PALETTE.length];
}

function hash(text) {
  let value = 0;
  for (const ch of text) value = (value * 31 + ch.charCodeAt(0)) >>> 0;
  return value;
}
