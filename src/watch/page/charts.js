// The page's charts (uPlot), apart from the data flow in app.js, so that a browser test can
// draw them with chosen values. Each y axis is as wide as its longest label: uPlot's fixed
// 50 px gutter clipped the tok/s axis from the left ("0,000" for 40,000).
"use strict";

const COLORS = ["#1f77b4", "#d62728", "#2ca02c", "#9467bd", "#ff7f0e", "#17becf", "#8c564b", "#e377c2"];

// uPlot's axis `size` hook: the gutter (CSS px) that holds this axis' tick labels whole.
// uPlot calls it again after the labels change (cycleNum counts the calls of one layout).
function axisSizeForLabels(u, values, axisIdx, cycleNum) {
  const axis = u.axes[axisIdx];
  if (cycleNum > 1) return axis._size;  // the labels settled: keep the width they got
  let widest = 0;
  if (values) {
    u.ctx.save();
    u.ctx.font = axis.font[0];
    for (const v of values) if (v != null) widest = Math.max(widest, u.ctx.measureText(String(v)).width);
    u.ctx.restore();
  }
  // measureText works in canvas pixels; the gutter is in CSS pixels.
  return Math.ceil(axis.ticks.size + axis.gap + widest / (window.devicePixelRatio || 1)) + 4;
}

// A chart in the element `id`: series after the x one, the settings `s` ({x, logX, logY}),
// extra scales (a second y axis on the right), and uPlot plugins.
function makeChart(id, series, s, extraScales, plugins) {
  const el = document.getElementById(id);
  el.textContent = "";
  const width = Math.max(320, el.clientWidth || 560);
  const scales = { x: { time: false, distr: s.logX ? 3 : 1 }, y: { distr: s.logY ? 3 : 1 } };
  Object.assign(scales, extraScales || {});
  const axes = [{ label: s.x }, { scale: "y", size: axisSizeForLabels }];
  if (extraScales) axes.push({ scale: "pct", side: 1, grid: { show: false }, size: axisSizeForLabels });
  const opts = {
    width, height: 240,
    scales,
    series: [{ label: s.x }].concat(series),
    axes,
    plugins: plugins || [],
    legend: { live: true },
  };
  const empty = [[]].concat(series.map(() => []));
  return new uPlot(opts, empty, el);
}
