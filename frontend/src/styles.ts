// The tab's stylesheet (inline styles are allowed by TensorBoard's CSP; scripts are not).
export const CSS = `
:root {
  --bg: #ffffff; --panel: #f8f9fa; --text: #212121; --muted: #616161; --border: #e0e0e0;
  --accent: #f57c00; --accent-text: #e65100; --error: #c62828; --error-bg: #fdecea;
  --focus: #1a73e8; --highlight: #1a73e8; --code-bg: #f1f3f4; --band: rgba(76, 175, 80, 0.16);
  --band-line: #2e7d32; --selection: rgba(26, 115, 232, 0.25); --grid: #eeeeee;
  --skip: #e65100;
  color-scheme: light;
}
/* data-theme is set by the tab: TensorBoard's own theme (body.dark-mode of the host page) when
   it can see it, else prefers-color-scheme */
:root[data-theme="dark"] {
    --bg: #202124; --panel: #292a2d; --text: #e8eaed; --muted: #9aa0a6; --border: #3c4043;
    --accent: #ffb74d; --accent-text: #ffb74d; --error: #f28b82; --error-bg: #3c1f1f;
    --focus: #8ab4f8; --highlight: #8ab4f8; --code-bg: #303134; --band: rgba(129, 201, 149, 0.18);
    --band-line: #81c995; --selection: rgba(138, 180, 248, 0.3); --grid: #303134;
    --skip: #ff9800;
    color-scheme: dark;
  }
[hidden] { display: none !important; } /* also over the display of canvases, grids */
html, body { margin: 0; height: 100%; }
html { scrollbar-gutter: stable; } /* no reflow (and refetch) when the page grows a scrollbar */
body {
  background: var(--bg); color: var(--text); overflow: auto;
  font: 13px/1.4 Roboto, "Helvetica Neue", Arial, system-ui, sans-serif;
}
.wur-root { display: flex; flex-direction: column; min-height: 100%; }
.wur-toolbar {
  display: flex; flex-wrap: wrap; gap: 8px 14px; align-items: center; padding: 8px 16px;
  border-bottom: 1px solid var(--border); background: var(--bg); position: sticky; top: 0; z-index: 5;
}
.wur-toolbar h1 { font-size: 15px; font-weight: 500; margin: 0 8px 0 0; }
.wur-field { display: inline-flex; align-items: center; gap: 6px; color: var(--muted); }
.wur-field input, .wur-field select, .wur-sidebar input[type=text] {
  font: inherit; color: var(--text); background: var(--bg); border: 1px solid var(--border);
  border-radius: 4px; padding: 3px 6px;
}
.wur-field input.wur-invalid { border-color: var(--error); }
.wur-field input[type=text].wur-band { width: 4.5em; }
.wur-field input[type=text].wur-patience { width: 3em; }
button, .wur-button {
  font: inherit; font-weight: 500; color: var(--accent-text); background: transparent;
  border: 1px solid var(--border); border-radius: 4px; padding: 3px 10px; cursor: pointer;
  text-decoration: none; display: inline-block;
}
button:hover, .wur-button:hover { background: var(--panel); }
button:disabled { color: var(--muted); cursor: default; }
:focus-visible { outline: 2px solid var(--focus); outline-offset: 1px; }
.wur-status { color: var(--muted); min-width: 6em; }
.wur-status.wur-busy::before { content: ""; display: inline-block; width: 8px; height: 8px; margin-right: 6px;
  border-radius: 50%; background: var(--accent); animation: wur-pulse 1s infinite alternate; }
@keyframes wur-pulse { from { opacity: .2; } to { opacity: 1; } }
.wur-error { color: var(--error); background: var(--error-bg); padding: 8px 16px; margin: 8px 16px; border-radius: 4px; white-space: pre-wrap; }
.wur-hint { color: var(--error); font-size: 12px; }
.wur-main { display: flex; flex: 1; min-height: 0; align-items: flex-start; }
/* as wide as the window allows (its flags' names and texts need the room), and wider or
   narrower by dragging its corner; in whole pixels where the browser can round (the heatmaps'
   cells then start on a pixel) */
.wur-sidebar {
  width: clamp(300px, 28vw, 480px); width: round(down, clamp(300px, 28vw, 480px), 1px);
  min-width: 240px; max-width: 60vw; resize: horizontal;
  flex: none; padding: 12px 16px; border-right: 1px solid var(--border); box-sizing: border-box;
  position: sticky; top: var(--toolbar-height, 48px); max-height: calc(100vh - var(--toolbar-height, 48px)); overflow-y: auto;
}
.wur-sidebar h2, .wur-content h2 { font-size: 13px; font-weight: 500; text-transform: uppercase; letter-spacing: .04em; color: var(--muted); margin: 12px 0 6px; }
.wur-sidebar h2:first-child { margin-top: 0; }
.wur-runs { list-style: none; margin: 6px 0; padding: 0; max-height: 240px; overflow: auto; }
.wur-runs li label { display: flex; align-items: center; gap: 6px; padding: 2px 0; cursor: pointer; }
.wur-runs li label > span:last-child { min-width: 0; overflow: hidden; text-overflow: ellipsis; }
.wur-swatch { width: 10px; height: 10px; border-radius: 2px; flex: none; display: inline-block; }
.wur-flags { margin: 6px 0; }
/* a flag in two lines: its layer, run and step, then what it says across the whole width;
   names wrap only where names.ts allows (<wbr>), a level too long for its column is cut */
.wur-flags-table, .wur-flags-table thead, .wur-flags-table tbody { display: block; width: 100%; font-size: 12px; }
.wur-flags-table tr {
  display: grid; grid-template-columns: minmax(0, 3fr) minmax(0, 2fr) auto; column-gap: 8px;
  padding: 3px 4px; border-bottom: 1px solid var(--grid);
}
.wur-flags-table thead tr { border-bottom-color: var(--border); padding-top: 2px; padding-bottom: 2px; }
.wur-flags-table th { text-align: left; font-weight: 500; color: var(--muted); padding: 0; }
.wur-flags-table th:last-child { text-align: right; }
.wur-flags-table td { padding: 0; min-width: 0; }
.wur-flags-table tbody tr { cursor: pointer; }
.wur-flags-table tbody tr:hover, .wur-flags-table tbody tr:focus-visible { background: var(--panel); }
.wur-flag-what { grid-column: 1 / -1; grid-row: 2; margin-top: 2px; }
.wur-flag-since { text-align: right; font-variant-numeric: tabular-nums; white-space: nowrap; }
.wur-flag-run { color: var(--muted); overflow: hidden; text-overflow: ellipsis; }
.wur-flag-tag { font-weight: 500; overflow: hidden; text-overflow: ellipsis; }
.wur-flag-meta { color: var(--muted); font-size: 12px; }
.wur-flag-nan { color: var(--error); }
.wur-content { flex: 1; min-width: 0; padding: 12px 16px 32px; box-sizing: border-box; }
.wur-legend { display: flex; flex-wrap: wrap; gap: 8px 20px; align-items: flex-start; margin-bottom: 8px; }
.wur-legend-specials { display: flex; flex-wrap: wrap; gap: 4px 12px; max-width: 640px; }
.wur-legend-special { display: inline-flex; align-items: center; gap: 4px; color: var(--muted); font-size: 12px; }
.wur-legend-special .wur-swatch { border: 1px solid var(--border); }
.wur-block { margin: 12px 0 20px; }
.wur-block-head { display: flex; align-items: center; gap: 8px; flex-wrap: wrap; margin-bottom: 4px; }
.wur-block-head h3 { font-size: 14px; font-weight: 500; margin: 0; min-width: 0; overflow: hidden; text-overflow: ellipsis; }
.wur-block-head .wur-meta { color: var(--muted); font-size: 12px; }
.wur-block-head .wur-spacer { flex: 1; }
.wur-damage { color: var(--error); background: var(--error-bg); border-radius: 4px; padding: 4px 8px; margin: 0 0 6px; font-size: 12px; overflow-wrap: anywhere; }
.wur-damage-title { font-weight: 500; }
.wur-grid { display: grid; grid-template-columns: var(--label-width) auto; }
.wur-labels { position: relative; }
.wur-label {
  display: block; width: 100%; box-sizing: border-box; text-align: right; padding: 0 6px 0 0; border: 0; border-radius: 0;
  overflow: hidden; text-overflow: ellipsis; white-space: nowrap; color: var(--text); font-weight: 400;
  background: transparent; cursor: pointer; line-height: 1; height: var(--row-height); font-size: var(--row-font);
}
.wur-label { direction: rtl; }
.wur-label > span { direction: ltr; unicode-bidi: isolate; }
.wur-label:hover { background: var(--panel); }
.wur-group-label { font-weight: 500; text-align: left; padding-left: 4px; direction: ltr; }
.wur-member { color: var(--muted); }
/* a flagged row: its name in the flags' color, a dot between it and its cells (red for a NaN;
   a group header's before its name), never cut by the ellipsis of a long name */
.wur-label[data-flagged] { color: var(--accent-text); }
.wur-flag-mark {
  display: inline-block; width: 6px; height: 6px; border-radius: 50%; background: var(--accent);
  margin: 0 0 0 5px; vertical-align: middle;
}
.wur-group-label .wur-flag-mark { margin: 0 5px 0 0; }
.wur-flag-mark.wur-flag-mark-nan { background: var(--error); }
.wur-label.wur-highlighted, .wur-label.wur-selected { color: var(--highlight); font-weight: 500; }
.wur-plot { position: relative; }
.wur-marks { display: block; margin-bottom: 2px; cursor: help; }
.wur-marks-title { color: var(--muted); font-size: 10px; line-height: 7px; text-align: right; padding-right: 6px; }
.wur-skip-swatch { background: var(--skip); }
.wur-held-swatch { width: 24px; }
.wur-ls { display: block; margin-bottom: 3px; cursor: crosshair; }
.wur-ls-title { position: relative; height: 45px; margin-bottom: 3px; color: var(--muted); font-size: 10px; line-height: 10px; text-align: right; padding-right: 6px; cursor: help; }
.wur-ls-title > span { position: absolute; right: 6px; white-space: nowrap; }
.wur-ls-high { top: 0; }
.wur-ls-name { top: 12px; font-weight: 500; }
.wur-ls-low { top: 24px; }
.wur-ls-bt { top: 36px; }
.wur-plot canvas { display: block; cursor: crosshair; image-rendering: pixelated; }
.wur-overlay { position: absolute; pointer-events: none; box-sizing: border-box; }
.wur-selection { background: var(--selection); border-left: 1px solid var(--focus); border-right: 1px solid var(--focus); top: 0; bottom: 0; }
.wur-row-highlight { left: -2px; right: -2px; border: 2px solid var(--highlight); }
.wur-axis { position: relative; height: 18px; color: var(--muted); font-size: 11px; }
.wur-tick { position: absolute; top: 0; transform: translateX(-50%); white-space: nowrap; }
.wur-tick::before { content: ""; position: absolute; left: 50%; top: -3px; height: 3px; border-left: 1px solid var(--muted); }
.wur-axis-title { color: var(--muted); font-size: 11px; text-align: right; padding-right: 14px; }
.wur-tooltip {
  position: fixed; z-index: 20; pointer-events: none; background: rgba(33, 33, 33, .94); color: #fff;
  padding: 6px 8px; border-radius: 4px; font-size: 12px; line-height: 1.45; max-width: 420px; overflow-wrap: anywhere;
  box-shadow: 0 2px 6px rgba(0,0,0,.3);
}
.wur-tooltip .wur-tt-tag { font-weight: 500; }
.wur-empty { max-width: 680px; padding: 24px 16px; }
.wur-empty pre, .wur-code { background: var(--code-bg); padding: 10px 12px; border-radius: 4px; overflow: auto; font: 12px/1.5 "Roboto Mono", Menlo, Consolas, monospace; }
.wur-detail { border: 1px solid var(--border); border-radius: 6px; padding: 8px 12px 12px; margin: 8px 0 16px; background: var(--bg); }
.wur-detail h3 { font-size: 14px; font-weight: 500; margin: 0; min-width: 0; overflow: hidden; text-overflow: ellipsis; }
.wur-detail-flag { color: var(--accent-text); background: var(--panel); border-left: 3px solid var(--accent); border-radius: 2px; padding: 4px 8px; margin: 6px 0; font-size: 12px; }
.wur-detail-flag.wur-detail-flag-nan { color: var(--error); background: var(--error-bg); border-left-color: var(--error); }
.wur-detail-flag-label { font-weight: 500; }
.wur-detail .wur-meta { color: var(--muted); font-size: 12px; margin: 2px 0 6px; }
.wur-detail-head { display: flex; gap: 8px; align-items: center; }
.wur-detail-head > * { min-width: 0; }
.wur-detail-head .wur-spacer { flex: 1; }
.wur-chart-title { color: var(--muted); font-size: 12px; margin: 8px 0 2px; }
.wur-detail canvas { display: block; }
.wur-suggestion { font-size: 12px; margin: 4px 0 0; }
.wur-compare-section { margin: 16px 0 20px; border-top: 1px solid var(--border); padding-top: 4px; }
/* the ranking's column no wider than what is left (its text cut, whole on hover) */
.wur-compare-grid { display: grid; grid-template-columns: var(--label-width) auto minmax(0, 1fr); align-items: start; }
.wur-compare-grid canvas { display: block; cursor: crosshair; image-rendering: pixelated; }
.wur-compare-ranking { list-style: none; margin: 0; padding: 0 0 0 8px; font-size: 11px; color: var(--muted); min-width: 0; }
.wur-compare-ranking li { height: 16px; line-height: 16px; white-space: nowrap; overflow: hidden; text-overflow: ellipsis; }
.wur-nowrap { white-space: nowrap; }
.wur-visually-hidden { position: absolute; width: 1px; height: 1px; overflow: hidden; clip: rect(0 0 0 0); }
`;
