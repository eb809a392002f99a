import { test } from "node:test";
import assert from "node:assert/strict";
import { codeColorTable, codeExtent, colorDomain, domainPosition, packRGBA, parseCssColor, specialColors, unpackRGBA, viridisRamp } from "../src/color";
import { paintCells, cellAt } from "../src/draw";
import { CODES } from "./fixtures";

const code = (m: number, k: number) => 6 + (k + 42) * 900 + (m - 100);

test("the domain covers the band with a decade to spare, widened to the data", () => {
  assert.deepEqual(colorDomain(NaN, NaN), { lo: -5, hi: -1 });
  assert.deepEqual(colorDomain(-3.5, -2.5), { lo: -5, hi: -1 });
  assert.deepEqual(colorDomain(-7.2, 0.3), { lo: -8, hi: 1 });
  assert.deepEqual(colorDomain(-3, -2, { low: 1e-6, high: 1e-5, target: 3e-6 }), { lo: -7, hi: -2 });
  assert.equal(domainPosition(-3, { lo: -5, hi: -1 }), 0.5);
  assert.equal(domainPosition(-9, { lo: -5, hi: -1 }), 0);
  assert.equal(domainPosition(3, { lo: -5, hi: -1 }), 1);
});

test("viridis: dark purple at the low end, yellow at the high end, monotonic lightness", () => {
  const ramp = viridisRamp();
  const [r0, g0, b0] = unpackRGBA(ramp[0]);
  const [r1, g1, b1] = unpackRGBA(ramp[255]);
  assert.ok(b0 > r0 && b0 > g0, "low end is purple-blue");
  assert.ok(r1 > b1 && g1 > b1, "high end is yellow");
  const luma = (v: number) => { const [r, g, b] = unpackRGBA(v); return 0.2126 * r + 0.7152 * g + 0.0722 * b; };
  for (let i = 8; i < 256; i += 8) assert.ok(luma(ramp[i]) > luma(ramp[i - 8]), `lightness grows at ${i}`);
});

test("code table: values by log10, specials distinct from each other and from the ramp", () => {
  const d = { lo: -5, hi: -1 };
  for (const dark of [false, true]) {
    const table = codeColorTable(d, { dark }, CODES);
    const specials = [0, 1, 2, 3, 4, 5].map((c) => table[c]);
    assert.equal(new Set(specials).size, 6, "six distinct special colors");
    const ramp = new Set(viridisRamp());
    for (const c of [1, 2, 3, 5]) assert.ok(!ramp.has(table[c]), `special ${c} not on the ramp`);
    const s = specialColors({ dark });
    assert.equal(table[0], packRGBA(...parseCssColor(s.missing)));
    assert.equal(table[1], packRGBA(...parseCssColor(s.nan)));
    assert.equal(table[2], packRGBA(...parseCssColor(s.inf)));
    // 1e-3 is the middle of [-5, -1]; 1e-5 and below clamp to the low end
    assert.equal(table[code(100, -5)], viridisRamp()[128]);
    assert.equal(table[code(100, -7)], viridisRamp()[0]);
    assert.equal(table[code(100, -20)], viridisRamp()[0]);
    assert.equal(table[code(999, 21)], viridisRamp()[255]);
  }
  assert.notEqual(codeColorTable(d, { dark: false }, CODES)[0], codeColorTable(d, { dark: true }, CODES)[0], "missing follows the theme");
});

test("extent of the value codes ignores the specials", () => {
  const [lo, hi] = codeExtent([new Uint16Array([0, 1, 2, 3, code(123, -5), code(500, -3)])], CODES);
  assert.ok(Math.abs(lo - Math.log10(1.23e-3)) < 1e-12);
  assert.ok(Math.abs(hi - Math.log10(0.5)) < 1e-12);
  assert.ok(codeExtent([new Uint16Array([0, 1, 2])], CODES).every(Number.isNaN));
});

test("paintCells writes the chosen rows in order, one pixel per cell", () => {
  const table = codeColorTable({ lo: -5, hi: -1 }, { dark: false }, CODES);
  const codes = new Uint16Array([0, 1, 2, 3, 4, 5]); // 3 rows x 2 columns
  const out = new Uint32Array(4);
  paintCells(codes, 2, [2, 0], table, out);
  assert.deepEqual(Array.from(out), [table[4], table[5], table[0], table[1]]);
  const big = new Uint32Array(1);
  paintCells(new Uint16Array([65535]), 1, [0], table, big);
  assert.equal(big[0], table[5], "an out-of-range code draws as huge");
});

test("cellAt maps CSS coordinates to cells", () => {
  assert.deepEqual(cellAt(0, 0, 300, 18, 5, 30), { row: 0, col: 0 });
  assert.deepEqual(cellAt(299.9, 89.9, 300, 18, 5, 30), { row: 4, col: 29 });
  assert.equal(cellAt(300, 0, 300, 18, 5, 30), null);
  assert.equal(cellAt(10, 90, 300, 18, 5, 30), null);
  assert.equal(cellAt(-1, 0, 300, 18, 5, 30), null);
});

test("codes past the header's max_exponent draw as huge; the table covers every uint16", () => {
  const table = codeColorTable({ lo: -5, hi: -1 }, { dark: false }, { ...CODES, max_exponent: 0 });
  assert.equal(table.length, 65536);
  const last = CODES.first_value + (0 - CODES.min_exponent + 1) * CODES.mantissas - 1; // 9.99 * 10^0
  assert.equal(table[last], viridisRamp()[255]);
  assert.equal(table[last + 1], table[CODES.huge]);
});
