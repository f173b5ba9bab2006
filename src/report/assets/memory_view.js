// steptrace's interactive memory view: memory_viz's Active Memory Timeline on a canvas.
// The largest allocations of the history (MAX_DRAWN, chosen by steptrace) are stacked in the
// order they were made, each as a band that drops when one below it is freed; every smaller
// allocation is one grey band on top ("smaller allocations"), so the outline is the memory
// allocated. Zoom: wheel (or the buttons); pan: drag; hover: an allocation's size, kind, the
// op that made it (a run with a trace), life and stack; click: pin it. Data: the JSON in <script id="steptrace-memory">.
"use strict";
(function () {
  const data = JSON.parse(document.getElementById("steptrace-memory").textContent);
  const fmtBytes = (b) => {
    const u = ["B", "KiB", "MiB", "GiB", "TiB"];
    let i = 0;
    while (Math.abs(b) >= 1024 && i < u.length - 1) { b /= 1024; i++; }
    return (i ? b.toFixed(1) : String(b)) + " " + u[i];
  };
  const esc = (s) => String(s).replace(/[&<>"]/g, (c) => ({ "&": "&amp;", "<": "&lt;", ">": "&gt;", '"': "&quot;" }[c]));

  // Stack the drawn allocations: for each, the offsets it sits at, as steps (xs[i] on).
  function layout(dev) {
    const a = dev.allocs, n = a.size.length, end = dev.entries;
    const made = a.made.map((m) => (m < 0 ? -1 : m)), freed = a.freed.map((f) => (f < 0 ? end : f));
    const ev = [];
    for (let i = 0; i < n; i++) { ev.push([made[i], 1, i]); ev.push([freed[i], 0, i]); }
    // Frees first at one entry, then allocations; ties in the order they were made.
    ev.sort((p, q) => p[0] - q[0] || p[1] - q[1] || p[2] - q[2]);
    const xs = Array.from({ length: n }, () => []), ys = Array.from({ length: n }, () => []);
    const alive = []; // indices in stack order
    let top = 0;
    for (const [x, isAlloc, i] of ev) {
      if (isAlloc) {
        alive.push(i); xs[i].push(x); ys[i].push(top); top += a.size[i];
      } else {
        const k = alive.indexOf(i);
        if (k < 0) continue;
        alive.splice(k, 1);
        for (let j = k; j < alive.length; j++) {
          const o = alive[j];
          xs[o].push(x); ys[o].push(ys[o][ys[o].length - 1] - a.size[i]);
        }
        top -= a.size[i];
      }
    }
    // Drawn bytes alive at each timeline point: the rest of what is allocated is "smaller".
    const tl = dev.timeline, drawnAt = new Float64Array(tl.entry.length);
    const deltas = ev.map(([x, isAlloc, i]) => [x, isAlloc ? a.size[i] : -a.size[i]]);
    let k = 0, cur = 0;
    for (let p = 0; p < tl.entry.length; p++) {
      while (k < deltas.length && deltas[k][0] <= tl.entry[p]) { cur += deltas[k][1]; k++; }
      drawnAt[p] = cur;
    }
    return { made, freed, xs, ys, drawnAt };
  }

  function offsetAt(L, i, x) {
    const xs = L.xs[i];
    let lo = 0, hi = xs.length - 1;
    while (lo < hi) { const mid = (lo + hi + 1) >> 1; if (xs[mid] <= x) lo = mid; else hi = mid - 1; }
    return L.ys[i][lo];
  }

  function view(root, dev) {
    const L = layout(dev);
    const a = dev.allocs, tl = dev.timeline;
    const canvas = root.querySelector("canvas"), tip = root.querySelector(".tip"), pin = root.querySelector(".pinned");
    const ctx = canvas.getContext("2d");
    let x0 = -1, x1 = dev.entries, hover = -1, pinned = -1, drag = null;
    let yMax = 1;
    for (let p = 0; p < tl.entry.length; p++) yMax = Math.max(yMax, tl.allocated[p], root.querySelector(".reserved").checked ? tl.reserved[p] : 0);
    const M = { l: 70, r: 10, t: 18, b: 24 };
    const W = () => canvas.clientWidth, H = () => canvas.clientHeight;
    const sx = (x) => M.l + ((x - x0) / (x1 - x0)) * (W() - M.l - M.r);
    const sy = (y) => H() - M.b - (y / yMax) * (H() - M.t - M.b);
    const ix = (px) => x0 + ((px - M.l) / (W() - M.l - M.r)) * (x1 - x0);
    const timeAt = (x) => {
      let lo = 0, hi = tl.entry.length - 1;
      while (lo < hi) { const mid = (lo + hi + 1) >> 1; if (tl.entry[mid] <= x) lo = mid; else hi = mid - 1; }
      return tl.time_ms[lo];
    };

    function draw() {
      const dpr = window.devicePixelRatio || 1;
      canvas.width = W() * dpr; canvas.height = H() * dpr;
      ctx.setTransform(dpr, 0, 0, dpr, 0, 0);
      ctx.clearRect(0, 0, W(), H());
      const showReserved = root.querySelector(".reserved").checked;
      yMax = 1;
      for (let p = 0; p < tl.entry.length; p++) yMax = Math.max(yMax, tl.allocated[p], showReserved ? tl.reserved[p] : 0);
      // Phases (annotated ranges) as a strip at the top; names on the outermost ones (an
      // optimizer step inside a profiler step is shaded, not named).
      ctx.font = "10px sans-serif";
      for (const ph of dev.phases) {
        if (ph.end < x0 || ph.start > x1) continue;
        const a0 = Math.max(sx(ph.start), M.l), a1 = Math.min(sx(ph.end), W() - M.r);
        ctx.fillStyle = ph.outer ? "#eee" : "#d8d8d8";
        ctx.fillRect(a0, ph.outer ? 2 : 8, Math.max(a1 - a0, 1), ph.outer ? 12 : 6);
      }
      ctx.fillStyle = "#333";
      for (const ph of dev.phases) {
        if (!ph.outer || ph.end < x0 || ph.start > x1) continue;
        const a0 = Math.max(sx(ph.start), M.l), a1 = Math.min(sx(ph.end), W() - M.r);
        if (a1 - a0 > 30) ctx.fillText(ph.name, a0 + 2, 11, a1 - a0 - 4);
      }
      // The smaller allocations: between the drawn stack and the allocated outline.
      ctx.fillStyle = "#ddd";
      ctx.beginPath();
      ctx.moveTo(sx(tl.entry[0]), sy(L.drawnAt[0]));
      for (let p = 0; p < tl.entry.length; p++) ctx.lineTo(sx(tl.entry[p]), sy(tl.allocated[p]));
      for (let p = tl.entry.length - 1; p >= 0; p--) ctx.lineTo(sx(tl.entry[p]), sy(L.drawnAt[p]));
      ctx.closePath(); ctx.fill();
      // The drawn allocations; a band thinner than half a pixel everywhere is left to the
      // outline (what is too small to see at this zoom).
      const pxPerByte = (H() - M.t - M.b) / yMax;
      for (let i = 0; i < a.size.length; i++) {
        if (L.freed[i] < x0 || L.made[i] > x1) continue;
        if (a.size[i] * pxPerByte < 0.5 && i !== hover && i !== pinned) continue;
        const xs = L.xs[i], ys = L.ys[i], h = a.size[i];
        ctx.beginPath();
        ctx.moveTo(sx(xs[0]), sy(ys[0]));
        for (let k = 1; k < xs.length; k++) { ctx.lineTo(sx(xs[k]), sy(ys[k - 1])); ctx.lineTo(sx(xs[k]), sy(ys[k])); }
        ctx.lineTo(sx(L.freed[i]), sy(ys[ys.length - 1]));
        ctx.lineTo(sx(L.freed[i]), sy(ys[ys.length - 1] + h));
        for (let k = xs.length - 1; k >= 1; k--) { ctx.lineTo(sx(xs[k]), sy(ys[k] + h)); ctx.lineTo(sx(xs[k]), sy(ys[k - 1] + h)); }
        ctx.lineTo(sx(xs[0]), sy(ys[0] + h));
        ctx.closePath();
        ctx.fillStyle = i === hover || i === pinned ? "#d62728" : data.colors[a.kind[i]] || "#999";
        ctx.fill();
      }
      // Allocated and reserved outlines, the peak.
      ctx.strokeStyle = "#000"; ctx.lineWidth = 1;
      ctx.beginPath();
      for (let p = 0; p < tl.entry.length; p++) (p ? ctx.lineTo : ctx.moveTo).call(ctx, sx(tl.entry[p]), sy(tl.allocated[p]));
      ctx.stroke();
      if (showReserved) {
        ctx.setLineDash([4, 3]); ctx.beginPath();
        for (let p = 0; p < tl.entry.length; p++) (p ? ctx.lineTo : ctx.moveTo).call(ctx, sx(tl.entry[p]), sy(tl.reserved[p]));
        ctx.stroke(); ctx.setLineDash([]);
      }
      if (dev.peak.entry >= x0 && dev.peak.entry <= x1) {
        ctx.fillStyle = "#d62728";
        ctx.fillRect(sx(dev.peak.entry) - 1, M.t, 2, H() - M.t - M.b);
      }
      // Axes.
      ctx.clearRect(0, 0, M.l - 1, H()); ctx.clearRect(0, H() - M.b + 1, W(), M.b);
      ctx.fillStyle = "#000"; ctx.font = "11px sans-serif";
      for (let k = 0; k <= 4; k++) {
        const y = (yMax * k) / 4;
        ctx.fillText(fmtBytes(Math.round(y)), 2, sy(y) + 4);
      }
      // Ticks over real entries: the view starts one before the first (what was alive before
      // the history began), which is no entry to name.
      const lo = Math.max(x0, 0);
      for (let k = 0; k <= 5; k++) {
        const x = lo + ((x1 - lo) * k) / 5, t = timeAt(x);
        ctx.textAlign = k === 0 ? "left" : k === 5 ? "right" : "center";
        ctx.fillText("entry " + Math.round(x) + (t === null || t === undefined ? "" : " · " + t.toFixed(1) + " ms"), sx(x), H() - 6);
      }
      ctx.textAlign = "left";
    }

    // The allocation under a point, or -1 (-2: the smaller allocations).
    function pick(px, py) {
      const x = ix(px);
      if (x < x0 || x > x1 || px < M.l) return -1;
      const yb = ((H() - M.b - py) / (H() - M.t - M.b)) * yMax;
      for (let i = 0; i < a.size.length; i++) {
        if (L.made[i] > x || L.freed[i] <= x) continue;
        const o = offsetAt(L, i, x);
        if (yb >= o && yb < o + a.size[i]) return i;
      }
      let p = 0;
      while (p + 1 < tl.entry.length && tl.entry[p + 1] <= x) p++;
      return yb >= 0 && yb <= tl.allocated[p] ? -2 : -1;
    }

    function describe(i, full) {
      if (i === -2) return "<b>smaller allocations</b>: the " + esc(data.smaller_note);
      const st = data.stacks[a.stack[i]] || [];
      const when = (e) => (e < 0 ? "before the history" : e >= dev.entries ? "alive at the end" : "entry " + e + (timeAt(e) == null ? "" : " (" + timeAt(e).toFixed(3) + " ms)"));
      const frames = (full ? st : st.slice(0, 12)).map(esc).join("<br>") + (!full && st.length > 12 ? "<br>… " + (st.length - 12) + " more (click to pin)" : "");
      const op = a.op && a.op[i] >= 0 ? "<br>made by <b>" + esc(data.ops[a.op[i]]) + "</b>" : "";
      return "<b>" + fmtBytes(a.size[i]) + "</b> · " + esc(data.kinds[a.kind[i]]) + op + "<br>made " + when(a.made[i]) + ", freed " + when(a.freed[i] < 0 ? dev.entries : a.freed[i]) + "<br><span class=st>" + (frames || "no stack recorded") + "</span>";
    }

    canvas.addEventListener("mousemove", (e) => {
      const r = canvas.getBoundingClientRect(), px = e.clientX - r.left, py = e.clientY - r.top;
      if (drag) {
        const dx = ((px - drag.px) / (W() - M.l - M.r)) * (drag.x1 - drag.x0);
        x0 = drag.x0 - dx; x1 = drag.x1 - dx; draw(); return;
      }
      const i = pick(px, py);
      if (i !== hover) { hover = i; draw(); }
      if (i === -1) { tip.style.display = "none"; return; }
      tip.innerHTML = describe(i, false);
      tip.style.display = "block";
      tip.style.left = Math.min(px + 14, W() - 380) + "px"; tip.style.top = py + 14 + "px";
    });
    canvas.addEventListener("mouseleave", () => { tip.style.display = "none"; hover = -1; drag = null; draw(); });
    canvas.addEventListener("mousedown", (e) => { const r = canvas.getBoundingClientRect(); drag = { px: e.clientX - r.left, x0, x1, moved: false }; });
    canvas.addEventListener("mouseup", (e) => {
      const r = canvas.getBoundingClientRect(), px = e.clientX - r.left;
      const click = drag && Math.abs(px - drag.px) < 3;
      drag = null;
      if (click) {
        pinned = pick(px, e.clientY - r.top);
        pin.innerHTML = pinned === -1 ? "" : describe(pinned, true);
        draw();
      }
    });
    canvas.addEventListener("wheel", (e) => {
      e.preventDefault();
      const r = canvas.getBoundingClientRect(), x = ix(e.clientX - r.left);
      const f = e.deltaY > 0 ? 1.25 : 0.8;
      x0 = x - (x - x0) * f; x1 = x + (x1 - x) * f;
      if (x1 - x0 < 4) { const c = (x0 + x1) / 2; x0 = c - 2; x1 = c + 2; }
      draw();
    }, { passive: false });
    canvas.addEventListener("dblclick", () => { x0 = -1; x1 = dev.entries; draw(); });
    root.querySelector(".reserved").addEventListener("change", draw);
    root.querySelector(".zoom-peak").addEventListener("click", () => {
      const w = Math.max(dev.entries / 50, 20);
      x0 = dev.peak.entry - w / 2; x1 = dev.peak.entry + w / 2; draw();
    });
    root.querySelector(".zoom-reset").addEventListener("click", () => { x0 = -1; x1 = dev.entries; draw(); });
    window.addEventListener("resize", draw);
    draw();
    root.dataset.ready = "1";
    // For tests: zoom to entries [a, b]; the screen point of the middle of allocation i at
    // the peak.
    root.zoomTo = (lo, hi) => { x0 = lo; x1 = hi; draw(); };
    root.pickAt = pick;
    root.describe = describe;
    root.offsetAt = (i, x) => offsetAt(L, i, x);
    root.pointAtPeak = (i) => {
      const x = dev.peak.entry;
      return [sx(x), sy(offsetAt(L, i, x) + a.size[i] / 2)];
    };
  }

  const t0 = performance.now();
  for (const dev of data.devices) {
    const root = document.getElementById("memory-view-" + dev.device);
    if (root) view(root, dev);
  }
  document.body.dataset.memoryViewMs = String(performance.now() - t0);
})();
