// Opens a report.html with the interactive memory view in headless Chromium and checks that
// it draws within 2 s, that hovering an allocation at the peak shows its size and stack (and,
// in a run with a trace, the op that made it), and that clicking pins it; saves a screenshot.
//
//   node tests/browser/memory_view.mjs REPORT.html SCREENSHOT.png [CHROMIUM]
//
// (tests/browser/run.sh makes the reports and runs this; needs `npm ci` here and Chromium.)
import puppeteer from "puppeteer-core";
import { pathToFileURL } from "node:url";

const [report, shot, chromium = "/usr/bin/chromium"] = process.argv.slice(2);
const fail = (msg) => { console.error(`FAIL ${report}: ${msg}`); process.exit(1); };
const browser = await puppeteer.launch({
  executablePath: chromium,
  headless: true,
  args: ["--no-sandbox", "--disable-gpu"],
});
try {
  const page = await browser.newPage();
  await page.setViewport({ width: 1300, height: 1000 });
  const errors = [];
  page.on("pageerror", (e) => errors.push(String(e)));
  const t0 = Date.now();
  await page.goto(pathToFileURL(report).href, { waitUntil: "load" });
  await page.waitForFunction(() => document.body.dataset.memoryViewMs !== undefined, { timeout: 10000 });
  const loadMs = Date.now() - t0;
  if (errors.length) fail(`script errors: ${errors.join("; ")}`);
  const viewMs = await page.evaluate(() => Number(document.body.dataset.memoryViewMs));
  const navMs = await page.evaluate(() => performance.now());
  console.log(`${report}: view laid out and drawn in ${viewMs.toFixed(0)} ms; page ready ${navMs.toFixed(0)} ms after navigation (${loadMs} ms with the browser's start)`);
  if (navMs > 2000) fail(`the page took ${navMs.toFixed(0)} ms to draw (more than 2 s)`);
  // The largest drawn allocation alive at device 0's peak: hover over its middle.
  const target = await page.evaluate(() => {
    const data = JSON.parse(document.getElementById("steptrace-memory").textContent);
    const dev = data.devices[0], a = dev.allocs, p = dev.peak.entry;
    let best = -1;
    for (let i = 0; i < a.size.length; i++) {
      const freed = a.freed[i] < 0 ? dev.entries : a.freed[i];
      if (a.made[i] <= p && p < freed && (best < 0 || a.size[i] > a.size[best])) best = i;
    }
    if (best < 0) return null;
    const root = document.getElementById("memory-view-" + dev.device);
    // In a run's report the view follows the plots: bring it on screen first.
    root.scrollIntoView({ block: "center" });
    // A few entries around the peak across the whole width: one pixel is then a fraction
    // of an entry, and the point is on the allocation whatever the rounding.
    root.zoomTo(p - 2, p + 3);
    const [x, y] = root.pointAtPeak(best);
    const r = root.querySelector("canvas").getBoundingClientRect();
    const px = (a.size[best] / dev.peak.bytes) * (r.height - 42);
    // A run with a trace: the op that made it, where the trace saw it made.
    const op = data.ops && a.op && a.op[best] >= 0 ? data.ops[a.op[best]] : null;
    return { i: best, x: r.left + x, y: r.top + y, px, size: a.size[best], frames: data.stacks[a.stack[best]], op };
  });
  if (!target) fail("no drawn allocation alive at the peak");
  // The mouse moves by whole pixels: the band must be a few pixels tall to be hit.
  if (target.px < 3) fail(`the largest allocation at the peak is ${target.px.toFixed(2)} px tall`);
  await page.mouse.move(target.x, target.y);
  const tip = await page.evaluate(() => {
    const t = document.querySelector(".mv .tip");
    return { shown: t.style.display === "block", text: t.innerText };
  });
  if (!tip.shown) fail("hovering the largest allocation at the peak shows no tooltip");
  const frame = target.frames.length ? target.frames[0] : "no stack recorded";
  if (!tip.text.includes(frame)) fail(`the tooltip does not show the allocation's stack (${frame}): ${tip.text}`);
  if (target.op && !tip.text.includes(target.op)) fail(`the tooltip does not name the op that made the allocation (${target.op}): ${tip.text}`);
  console.log(`hover: ${tip.text.split("\n").slice(0, 3).join(" | ")}`);
  // A run with a trace names the op that made each allocation the trace saw made: the
  // largest of those shows it in its description.
  const made = await page.evaluate(() => {
    const data = JSON.parse(document.getElementById("steptrace-memory").textContent);
    const dev = data.devices[0], a = dev.allocs;
    if (!data.ops) return null;
    let j = -1;
    for (let i = 0; i < a.size.length; i++) if (a.op[i] >= 0 && (j < 0 || a.size[i] > a.size[j])) j = i;
    if (j < 0) return { none: true };
    const root = document.getElementById("memory-view-" + dev.device);
    const d = document.createElement("div");
    d.innerHTML = root.describe(j, false);
    return { op: data.ops[a.op[j]], text: d.innerText };
  });
  if (made && made.none) fail("a run with a trace names no op for any drawn allocation");
  if (made && !made.text.includes(made.op)) fail(`the description does not name the op (${made.op}): ${made.text}`);
  if (made) console.log(`made by: ${made.text.split("\n").slice(0, 2).join(" | ")}`);
  await page.mouse.click(target.x, target.y);
  const pinned = await page.evaluate(() => document.querySelector(".mv .pinned").innerText);
  if (!pinned.includes(frame)) fail("clicking does not pin the allocation");
  // The screenshot: the whole history, the pinned allocation in red, hovering it.
  await page.evaluate(() => document.querySelector(".mv .zoom-reset").click());
  const el = await page.$(".mv");
  await el.screenshot({ path: shot });
  console.log(`screenshot: ${shot}`);
} finally {
  await browser.close();
}
