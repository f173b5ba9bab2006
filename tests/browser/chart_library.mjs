// Would a small charting library draw the memory view better than its own canvas code? The
// measurement behind docs/reports.md's choice: the same report's data drawn by the view
// (assets/memory_view.js) and by uPlot 1.6.32 (51 KB minified, MIT: the smallest well-kept
// library that zooms and pans a time series on a canvas), in the same headless Chromium.
//
//   node tests/browser/chart_library.mjs REPORT.html [CHROMIUM] [COUNTS]
//
// uPlot draws series over one shared x: each allocation is a band between two stepped series
// (its lower and upper edge), null outside its life, at every x where any drawn allocation
// moves. COUNTS (default 250,500,1000,2000,5000): how many of the largest allocations it is
// given. Prints, for each, the time to build uPlot's data, to draw it and to redraw it zoomed,
// and the view's own time for all of its allocations (and for a zoom redraw).
import puppeteer from "puppeteer-core";
import { readFileSync } from "node:fs";
import { pathToFileURL } from "node:url";
import { createRequire } from "node:module";

const [report, chromium = "/usr/bin/chromium", counts = "250,500,1000,2000,5000"] = process.argv.slice(2);
const require = createRequire(import.meta.url);
const lib = readFileSync(require.resolve("uplot/dist/uPlot.iife.min.js"), "utf8");
const css = readFileSync(require.resolve("uplot/dist/uPlot.min.css"), "utf8");
const html = readFileSync(report, "utf8");
const json = html
  .split('<script id="steptrace-memory" type="application/json">')[1]
  .split("</script>")[0];

const browser = await puppeteer.launch({ executablePath: chromium, headless: true, args: ["--no-sandbox", "--disable-gpu"] });
try {
  const page = await browser.newPage();
  await page.setViewport({ width: 1300, height: 1000 });
  // The view itself, on the report.
  await page.goto(pathToFileURL(report).href, { waitUntil: "load" });
  await page.waitForFunction(() => document.body.dataset.memoryViewMs !== undefined, { timeout: 20000 });
  const own = await page.evaluate(() => Number(document.body.dataset.memoryViewMs));
  const ownZoom = await page.evaluate(() => {
    const data = JSON.parse(document.getElementById("steptrace-memory").textContent);
    const dev = data.devices[0], root = document.getElementById("memory-view-" + dev.device);
    const t = performance.now();
    root.zoomTo(0.45 * dev.entries, 0.55 * dev.entries);
    return performance.now() - t;
  });
  const drawn = JSON.parse(json.replace(/<\\\//g, "</")).devices[0].allocs.size.length;
  console.log(`the view (memory_view.js): ${drawn} allocations laid out and drawn in ${own.toFixed(0)} ms, a zoom redrawn in ${ownZoom.toFixed(0)} ms`);
  for (const n of counts.split(",").map(Number)) {
    if (n > drawn) continue;
    const p2 = await browser.newPage();
    await p2.setViewport({ width: 1300, height: 1000 });
    await p2.setContent(`<html><head><style>${css}</style></head><body><div id=c></div>
      <script id="steptrace-memory" type="application/json">${json}</script><script>${lib}</script></body></html>`);
    const r = await p2.evaluate(async (n) => {
      const data = JSON.parse(document.getElementById("steptrace-memory").textContent);
      const dev = data.devices[0], a = dev.allocs, end = dev.entries;
      const t0 = performance.now();
      // The n largest, stacked in the order they were made, as the view stacks them.
      const keep = [...a.size.keys()].sort((p, q) => a.size[q] - a.size[p]).slice(0, n).sort((p, q) => p - q);
      const made = keep.map((i) => Math.max(a.made[i], -1)), freed = keep.map((i) => (a.freed[i] < 0 ? end : a.freed[i]));
      const size = keep.map((i) => a.size[i]);
      const ev = [];
      keep.forEach((_, k) => { ev.push([made[k], 1, k]); ev.push([freed[k], 0, k]); });
      ev.sort((p, q) => p[0] - q[0] || p[1] - q[1] || p[2] - q[2]);
      const xs = [...new Set(ev.map((e) => e[0]))];
      const col = new Map(xs.map((x, j) => [x, j]));
      // Lower edge of each band at each x (null: not alive), filled step by step.
      const lower = keep.map(() => new Array(xs.length).fill(null));
      const alive = [];
      let last = null;
      for (const [x, isAlloc, k] of ev) {
        const c = col.get(x);
        if (c !== last) {
          // Carry every alive band's offset into the new column.
          for (let q = 0, off = 0; q < alive.length; q++) { lower[alive[q]][c] = off; off += size[alive[q]]; }
          last = c;
        }
        if (isAlloc) { alive.push(k); }
        else { const i = alive.indexOf(k); if (i >= 0) alive.splice(i, 1); }
        for (let q = 0, off = 0; q < alive.length; q++) { lower[alive[q]][c] = off; off += size[alive[q]]; }
      }
      const series = [{}], cols = [xs], bands = [];
      keep.forEach((_, k) => {
        const lo = lower[k], hi = lo.map((v) => (v === null ? null : v + size[k]));
        cols.push(hi, lo);
        const s = { stroke: "transparent", width: 0, paths: uPlot.paths.stepped({ align: 1 }), spanGaps: false, points: { show: false } };
        series.push({ ...s }, { ...s });
        bands.push({ series: [cols.length - 2, cols.length - 1], fill: "rgba(49,130,189,0.8)" });
      });
      const t1 = performance.now();
      let drawnAt = null;
      const u = new uPlot({
        width: 1240, height: 440, series, bands, legend: { show: false },
        scales: { x: { time: false } }, cursor: { drag: { x: true } },
        hooks: { draw: [() => { drawnAt = performance.now(); }] },
      }, cols, document.getElementById("c"));
      while (drawnAt === null) await new Promise((res) => requestAnimationFrame(res));
      const draw = drawnAt - t1;
      // A zoom to the middle tenth: what each wheel step or drag costs.
      drawnAt = null;
      const t2 = performance.now(), lo = xs[0], hi = xs[xs.length - 1];
      u.setScale("x", { min: lo + 0.45 * (hi - lo), max: lo + 0.55 * (hi - lo) });
      while (drawnAt === null) await new Promise((res) => requestAnimationFrame(res));
      return { build: t1 - t0, draw, zoom: drawnAt - t2, xs: xs.length, values: 2 * keep.length * xs.length };
    }, n).catch((e) => ({ error: String(e) }));
    if (r.error) console.log(`uPlot, ${n} largest: failed: ${r.error}`);
    else console.log(`uPlot, ${n} largest: data built in ${r.build.toFixed(0)} ms (${r.xs} x values, ${r.values} cells), drawn in ${r.draw.toFixed(0)} ms, a zoom redrawn in ${r.zoom.toFixed(0)} ms`);
    await p2.close();
  }
} finally {
  await browser.close();
}
