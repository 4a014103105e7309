/* qledge panel: a small QR encoder (ISO/IEC 18004) for the TOTP enrolment's otpauth:// URI:
 * byte mode, error correction M, versions 1-10 (up to 213 bytes). Drawn on a canvas; no
 * HTML is parsed. */

// Per version (index 1-10) at level M: EC codewords per block, and the blocks as
// [count, data codewords] groups; alignment pattern centres.
const BLOCKS = [null, [10, [[1, 16]]], [16, [[1, 28]]], [26, [[1, 44]]], [18, [[2, 32]]],
  [24, [[2, 43]]], [16, [[4, 27]]], [18, [[4, 31]]], [22, [[2, 38], [2, 39]]],
  [22, [[3, 36], [2, 37]]], [26, [[4, 43], [1, 44]]]];
const ALIGN = [null, [], [6, 18], [6, 22], [6, 26], [6, 30], [6, 34], [6, 22, 38],
  [6, 24, 42], [6, 26, 46], [6, 28, 50]];
const MAX_VERSION = 10;

function gfMul(x, y) {
  let z = 0;
  for (let i = 7; i >= 0; i -= 1) {
    z = (z << 1) ^ ((z >>> 7) * 0x11d);
    z ^= ((y >>> i) & 1) * x;
  }
  return z;
}
function rsDivisor(degree) {
  const result = new Array(degree - 1).fill(0).concat([1]);
  let root = 1;
  for (let i = 0; i < degree; i += 1) {
    for (let j = 0; j < result.length; j += 1) {
      result[j] = gfMul(result[j], root);
      if (j + 1 < result.length) result[j] ^= result[j + 1];
    }
    root = gfMul(root, 2);
  }
  return result;
}
function rsRemainder(data, divisor) {
  const result = divisor.map(() => 0);
  for (const b of data) {
    const factor = b ^ result.shift();
    result.push(0);
    divisor.forEach((coef, i) => { result[i] ^= gfMul(coef, factor); });
  }
  return result;
}

const dataCapacity = (v) => BLOCKS[v][1].reduce((n, [count, size]) => n + count * size, 0);

// The data codewords: mode, length, bytes, terminator, padding.
function dataCodewords(bytes, version) {
  const bits = [];
  const put = (value, len) => { for (let i = len - 1; i >= 0; i -= 1) bits.push((value >>> i) & 1); };
  put(4, 4);
  put(bytes.length, version < 10 ? 8 : 16);
  bytes.forEach((b) => put(b, 8));
  const capacity = dataCapacity(version) * 8;
  put(0, Math.min(4, capacity - bits.length));
  put(0, (8 - (bits.length % 8)) % 8);
  for (let pad = 0xec; bits.length < capacity; pad ^= 0xec ^ 0x11) put(pad, 8);
  const out = [];
  for (let i = 0; i < bits.length; i += 8) out.push(bits.slice(i, i + 8).reduce((a, b) => (a << 1) | b, 0));
  return out;
}

// Split into blocks, add each block's EC codewords, interleave.
function withErrorCorrection(data, version) {
  const [ecLen, groups] = BLOCKS[version];
  const divisor = rsDivisor(ecLen);
  const blocks = [];
  let at = 0;
  for (const [count, size] of groups) {
    for (let i = 0; i < count; i += 1) {
      const part = data.slice(at, at + size);
      at += size;
      blocks.push([part, rsRemainder(part, divisor)]);
    }
  }
  const out = [];
  const longest = Math.max(...blocks.map(([d]) => d.length));
  for (let i = 0; i < longest; i += 1) blocks.forEach(([d]) => { if (i < d.length) out.push(d[i]); });
  for (let i = 0; i < ecLen; i += 1) blocks.forEach(([, ec]) => out.push(ec[i]));
  return out;
}

function bchFormat(mask) {
  const data = (0 << 3) | mask; // level M = 00
  let rem = data;
  for (let i = 0; i < 10; i += 1) rem = (rem << 1) ^ ((rem >>> 9) * 0x537);
  return ((data << 10) | rem) ^ 0x5412;
}
function bchVersion(version) {
  let rem = version;
  for (let i = 0; i < 12; i += 1) rem = (rem << 1) ^ ((rem >>> 11) * 0x1f25);
  return (version << 12) | rem;
}

const MASKS = [
  (x, y) => (x + y) % 2 === 0, (x, y) => y % 2 === 0, (x) => x % 3 === 0,
  (x, y) => (x + y) % 3 === 0, (x, y) => (Math.floor(x / 3) + Math.floor(y / 2)) % 2 === 0,
  (x, y) => ((x * y) % 2) + ((x * y) % 3) === 0, (x, y) => (((x * y) % 2) + ((x * y) % 3)) % 2 === 0,
  (x, y) => (((x + y) % 2) + ((x * y) % 3)) % 2 === 0,
];

function baseMatrix(version) {
  const size = version * 4 + 17;
  const dark = Array.from({ length: size }, () => new Array(size).fill(false));
  const fixed = Array.from({ length: size }, () => new Array(size).fill(false));
  const set = (x, y, on) => { dark[y][x] = on; fixed[y][x] = true; };
  for (let i = 0; i < size; i += 1) { set(6, i, i % 2 === 0); set(i, 6, i % 2 === 0); }
  const finder = (cx, cy) => {
    for (let dy = -4; dy <= 4; dy += 1) {
      for (let dx = -4; dx <= 4; dx += 1) {
        const x = cx + dx; const y = cy + dy;
        const d = Math.max(Math.abs(dx), Math.abs(dy));
        if (x >= 0 && x < size && y >= 0 && y < size) set(x, y, d !== 2 && d !== 4);
      }
    }
  };
  finder(3, 3); finder(size - 4, 3); finder(3, size - 4);
  const align = ALIGN[version];
  align.forEach((ax, i) => align.forEach((ay, j) => {
    const corner = (i === 0 && j === 0) || (i === 0 && j === align.length - 1) ||
      (i === align.length - 1 && j === 0);
    if (corner) return;
    for (let dy = -2; dy <= 2; dy += 1) {
      for (let dx = -2; dx <= 2; dx += 1) set(ax + dx, ay + dy, Math.max(Math.abs(dx), Math.abs(dy)) !== 1);
    }
  }));
  drawFormat(set, size, 0); // reserve; drawn for real after masking
  if (version >= 7) {
    const bits = bchVersion(version);
    for (let i = 0; i < 18; i += 1) {
      const on = ((bits >>> i) & 1) === 1;
      const a = size - 11 + (i % 3); const b = Math.floor(i / 3);
      set(a, b, on); set(b, a, on);
    }
  }
  return { size, dark, fixed, set };
}

function drawFormat(set, size, mask) {
  const bits = bchFormat(mask);
  const bit = (i) => ((bits >>> i) & 1) === 1;
  for (let i = 0; i <= 5; i += 1) set(8, i, bit(i));
  set(8, 7, bit(6)); set(8, 8, bit(7)); set(7, 8, bit(8));
  for (let i = 9; i < 15; i += 1) set(14 - i, 8, bit(i));
  for (let i = 0; i < 8; i += 1) set(size - 1 - i, 8, bit(i));
  for (let i = 8; i < 15; i += 1) set(8, size - 15 + i, bit(i));
  set(8, size - 8, true); // the dark module
}

function placeData(m, codewords) {
  const { size, dark, fixed } = m;
  let i = 0;
  for (let right = size - 1; right >= 1; right -= 2) {
    if (right === 6) right = 5;
    for (let vert = 0; vert < size; vert += 1) {
      for (let j = 0; j < 2; j += 1) {
        const x = right - j;
        const y = ((right + 1) & 2) === 0 ? size - 1 - vert : vert;
        if (!fixed[y][x] && i < codewords.length * 8) {
          dark[y][x] = ((codewords[i >>> 3] >>> (7 - (i & 7))) & 1) === 1;
          i += 1;
        }
      }
    }
  }
}

// The standard's penalty (rules 1-4): the mask with the lowest wins.
function penalty(dark) {
  const size = dark.length;
  let score = 0;
  const lines = [];
  for (let y = 0; y < size; y += 1) lines.push(dark[y]);
  for (let x = 0; x < size; x += 1) lines.push(dark.map((row) => row[x]));
  for (const line of lines) {
    let run = 1;
    for (let i = 1; i <= size; i += 1) {
      if (i < size && line[i] === line[i - 1]) { run += 1; continue; }
      if (run >= 5) score += run - 2;
      run = 1;
    }
    const s = line.map((d) => (d ? '1' : '0')).join('');
    for (const pat of ['10111010000', '00001011101']) {
      for (let at = s.indexOf(pat); at >= 0; at = s.indexOf(pat, at + 1)) score += 40;
    }
  }
  let on = 0;
  for (let y = 0; y < size; y += 1) {
    for (let x = 0; x < size; x += 1) {
      if (dark[y][x]) on += 1;
      if (x + 1 < size && y + 1 < size && dark[y][x] === dark[y][x + 1] &&
          dark[y][x] === dark[y + 1][x] && dark[y][x] === dark[y + 1][x + 1]) score += 3;
    }
  }
  score += Math.floor(Math.abs(on * 20 - size * size * 10) / (size * size)) * 10;
  return score;
}

// The QR symbol of `text` (UTF-8): { version, size, mask, dark: boolean[y][x] };
// `onlyMask` (tests): that mask instead of the best by the penalty.
function encodeQr(text, onlyMask) {
  const bytes = Array.from(new TextEncoder().encode(text));
  let version = 1;
  while (version <= MAX_VERSION &&
         dataCapacity(version) * 8 < 4 + (version < 10 ? 8 : 16) + bytes.length * 8) version += 1;
  if (version > MAX_VERSION) throw new RangeError('text too long for a version 10 QR code');
  const codewords = withErrorCorrection(dataCodewords(bytes, version), version);
  let best = null;
  for (let mask = 0; mask < 8; mask += 1) {
    if (onlyMask !== undefined && mask !== onlyMask) continue;
    const m = baseMatrix(version);
    placeData(m, codewords);
    for (let y = 0; y < m.size; y += 1) {
      for (let x = 0; x < m.size; x += 1) if (!m.fixed[y][x] && MASKS[mask](x, y)) m.dark[y][x] = !m.dark[y][x];
    }
    drawFormat(m.set, m.size, mask);
    const score = penalty(m.dark);
    if (best === null || score < best.score) best = { version, size: m.size, mask, dark: m.dark, score };
  }
  return best;
}

// A <canvas> of the symbol with a 4-module quiet zone, `px` wide and high (or a little
// less: whole pixels per module keep the edges sharp).
function qrCanvas(text, px) {
  const { size, dark } = encodeQr(text);
  const scale = Math.max(1, Math.floor(px / (size + 8)));
  const full = (size + 8) * scale;
  const canvas = document.createElement('canvas');
  canvas.width = full;
  canvas.height = full;
  const g = canvas.getContext('2d');
  g.fillStyle = '#fff';
  g.fillRect(0, 0, full, full);
  g.fillStyle = '#000';
  for (let y = 0; y < size; y += 1) {
    for (let x = 0; x < size; x += 1) {
      if (dark[y][x]) g.fillRect((x + 4) * scale, (y + 4) * scale, scale, scale);
    }
  }
  return canvas;
}

export { encodeQr, qrCanvas, rsRemainder, rsDivisor, bchFormat };
