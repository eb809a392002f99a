// The legend: the color scale (a canvas: viridis over log10 of the ratio, the band and its
// target, decade ticks) and the special cells. Its DOM is built once; update() redraws it in
// place, clear() leaves the element empty (no run shown).
import { Band, Domain, domainPosition, heldColor, RAMP_SIZE, SPECIAL_MEANING, Special, specialColors, unpackRGBA, viridisRamp } from "./color";
import { el } from "./dom";
import { decadeTicks, formatPow10, formatRatio, formatShortRatio } from "./format";
import type { ChartColors } from "./theme";

export const SKIPPED_MEANING = "skipped step (mark above the heatmap): the optimizer applied no update, its ratios are 0";
export const HELD_MEANING = "pale: held, the layer logged no step in this column; the ratio of its last logged step before it (the tooltip names the step)";

/** A color-scale canvas: SCALE_W CSS px wide, its bar SCALE_BAR_W x SCALE_BAR_H CSS px from x
 * SCALE_X0. */
export const SCALE_W = 360, SCALE_X0 = 10, SCALE_BAR_W = SCALE_W - 20, SCALE_BAR_H = 12;

/** Sizes `canvas` to SCALE_W x `height` CSS px at the device's resolution, clears it and draws
 * `ramp` (RAMP_SIZE packed RGBA, low to high) as the bar at `barY`; its context, in CSS px. */
export function drawScaleBar(canvas: HTMLCanvasElement, ramp: Uint32Array, height: number, barY: number): CanvasRenderingContext2D {
  const dpr = window.devicePixelRatio || 1;
  canvas.width = SCALE_W * dpr; canvas.height = height * dpr;
  canvas.style.width = `${SCALE_W}px`; canvas.style.height = `${height}px`;
  const ctx = canvas.getContext("2d")!;
  ctx.setTransform(dpr, 0, 0, dpr, 0, 0);
  ctx.clearRect(0, 0, SCALE_W, height);
  for (let i = 0; i < SCALE_BAR_W; i++) {
    const [r, g, b] = unpackRGBA(ramp[Math.round((i / (SCALE_BAR_W - 1)) * (RAMP_SIZE - 1))]);
    ctx.fillStyle = `rgb(${r},${g},${b})`;
    ctx.fillRect(SCALE_X0 + i, barY, 1.5, SCALE_BAR_H);
  }
  return ctx;
}

const H = 52, X0 = SCALE_X0, BAR_W = SCALE_BAR_W, BAR_Y = 20, BAR_H = SCALE_BAR_H;

/** Draws the color scale of `d` with the band on `canvas` (SCALE_W x H CSS px at the device's
 * resolution). */
export function drawColorScale(canvas: HTMLCanvasElement, d: Domain, band: Band, colors: ChartColors): void {
  const ctx = drawScaleBar(canvas, viridisRamp(), H, BAR_Y);
  const xOf = (lg: number) => X0 + domainPosition(lg, d) * BAR_W;
  const bx0 = xOf(Math.log10(band.low)), bx1 = xOf(Math.log10(band.high)), bt = xOf(Math.log10(band.target));
  ctx.strokeStyle = colors.bandLine;
  ctx.lineWidth = 2;
  ctx.strokeRect(bx0, BAR_Y - 1, bx1 - bx0, BAR_H + 2);
  ctx.font = "11px Roboto, Arial, sans-serif";
  ctx.fillStyle = colors.bandLine;
  ctx.textAlign = "center";
  ctx.textBaseline = "bottom";
  ctx.fillText(`healthy band ${formatShortRatio(band.low)} – ${formatShortRatio(band.high)}`, (bx0 + bx1) / 2, BAR_Y - 5);
  ctx.beginPath();
  ctx.moveTo(bt - 4, BAR_Y - 4); ctx.lineTo(bt + 4, BAR_Y - 4); ctx.lineTo(bt, BAR_Y + 2); ctx.closePath();
  ctx.fill();
  ctx.fillStyle = colors.muted;
  ctx.textBaseline = "top";
  for (const k of decadeTicks(d.lo, d.hi, 10)) {
    ctx.fillRect(Math.round(xOf(k)), BAR_Y + BAR_H, 1, 3);
    ctx.fillText(formatPow10(k), xOf(k), BAR_Y + BAR_H + 4);
  }
}

export interface LegendView { domain: Domain; band: Band; dark: boolean; colors: ChartColors; skipped: boolean; held: boolean }

export class Legend {
  readonly element = el("div", { class: "wur-legend", "data-testid": "wur-legend" });
  private readonly canvas = el("canvas", { role: "img" });
  private readonly title = el("div", { class: "wur-chart-title" });
  private readonly swatches = new Map<Special, HTMLElement>();
  private readonly skippedItem = el("span", { class: "wur-legend-special", "data-testid": "wur-legend-skipped" },
    el("span", { class: "wur-swatch wur-skip-swatch" }), el("span", { text: SKIPPED_MEANING }));
  private readonly heldSwatch = el("span", { class: "wur-swatch wur-held-swatch" });
  private readonly heldItem = el("span", { class: "wur-legend-special", "data-testid": "wur-legend-held" },
    this.heldSwatch, el("span", { text: HELD_MEANING }));
  private readonly specials = el("div", { class: "wur-legend-specials", "aria-label": "Special cells" });
  private readonly parts: HTMLElement[];

  constructor() {
    for (const s of Object.keys(SPECIAL_MEANING) as Special[]) {
      const sw = el("span", { class: "wur-swatch" });
      this.swatches.set(s, sw);
      this.specials.append(el("span", { class: "wur-legend-special" }, sw, el("span", { text: SPECIAL_MEANING[s] })));
    }
    this.parts = [el("div", {}, this.title, this.canvas), this.specials];
  }

  update(v: LegendView): void {
    const { domain: d, band } = v;
    this.canvas.setAttribute("aria-label", `Color scale: log10 of the ratio from ${formatPow10(d.lo)} to ${formatPow10(d.hi)}; healthy band ${formatRatio(band.low)} to ${formatRatio(band.high)}, target ${formatRatio(band.target)}`);
    this.title.textContent = `Color: ratio on a log scale (▼ target ${formatShortRatio(band.target)}); same scale for every run`;
    drawColorScale(this.canvas, d, band, v.colors);
    const colors = specialColors({ dark: v.dark });
    for (const [s, sw] of this.swatches) sw.style.background = colors[s];
    if (v.skipped) this.specials.append(this.skippedItem); else this.skippedItem.remove();
    if (v.held) {
      // the held shades of a few colors of the scale, side by side
      const ramp = viridisRamp(), css = (i: number) => {
        const [r, g, b] = unpackRGBA(heldColor(ramp[i], { dark: v.dark }));
        return `rgb(${r},${g},${b})`;
      };
      this.heldSwatch.style.background = `linear-gradient(90deg, ${css(0)} 0 33%, ${css(128)} 33% 67%, ${css(RAMP_SIZE - 1)} 67%)`;
      this.specials.append(this.heldItem);
    } else {
      this.heldItem.remove();
    }
    if (this.element.firstChild !== this.parts[0]) this.element.replaceChildren(...this.parts);
  }

  /** Nothing shown (no run): the element stays, empty. */
  clear(): void {
    this.element.replaceChildren();
  }
}
