// looptrace report: the step crosshair, the click that opens a waterfall, sortable columns.
// Inlined into the page; it reads its data from the JSON of #lt-data.
(function () {
  var data = JSON.parse(document.getElementById('lt-data').textContent);
  var tip = document.getElementById('tip');

  // The value of the sorted `list` nearest to `v` (the lower one on a tie); null if empty.
  function nearest(list, v) {
    var lo = 0, hi = list.length - 1;
    if (hi < 0) return null;
    while (lo < hi) {
      var m = (lo + hi) >> 1;
      if (list[m] < v) lo = m + 1; else hi = m;
    }
    if (lo > 0 && Math.abs(list[lo - 1] - v) <= Math.abs(list[lo] - v)) lo--;
    return list[lo];
  }

  function fmt(s) {
    if (s >= 1) return s.toPrecision(3) + ' s';
    if (s >= 1e-3) return (s * 1e3).toPrecision(3) + ' ms';
    return (s * 1e6).toPrecision(3) + ' µs';
  }

  // Open the waterfall of `step`: a copy of its <template>.
  function show(step) {
    var w = document.getElementById('wf-' + step);
    var box = document.getElementById('waterfall');
    if (!w || !box) return;
    box.innerHTML = '';
    box.appendChild(w.content.cloneNode(true));
    document.getElementById('wf-title').textContent = 'step ' + step;
  }

  var tl = document.getElementById('timeline');
  if (tl) {
    var first = +tl.dataset.first, last = +tl.dataset.last, left = +tl.dataset.left,
      width = +tl.dataset.width, cross = document.getElementById('crosshair');
    var hover = data.hover.ranks.map(function (r) {
      var pts = data.hover.points[r];
      return {rank: r, pts: pts, steps: pts.map(function (p) { return p[0]; })};
    });
    function scale() {
      return tl.getBoundingClientRect().width / tl.viewBox.baseVal.width;
    }
    function stepAt(ev) {
      var x = (ev.clientX - tl.getBoundingClientRect().left) / scale();
      return first + (x - left) / width * Math.max(1, last - first);
    }
    tl.addEventListener('mousemove', function (ev) {
      var s = stepAt(ev);
      var lines = [];
      var at = null;
      hover.forEach(function (h) {
        var n = nearest(h.steps, s);
        if (n === null) return;
        if (at === null) at = n;
        var p = h.pts[h.steps.indexOf(n)];
        lines.push('rank ' + h.rank + '  step ' + p[0] + '  ' + fmt(p[1]));
      });
      if (!lines.length) return;
      var x = left + (at - first) / Math.max(1, last - first) * width;
      cross.setAttribute('x1', x);
      cross.setAttribute('x2', x);
      cross.setAttribute('visibility', 'visible');
      tip.textContent = lines.slice(0, 12).join('\n') +
        (lines.length > 12 ? '\n… ' + (lines.length - 12) + ' more ranks' : '');
      tip.style.display = 'block';
      tip.style.left = (ev.clientX + 14) + 'px';
      tip.style.top = (ev.clientY + 14) + 'px';
    });
    tl.addEventListener('mouseleave', function () {
      tip.style.display = 'none';
      cross.setAttribute('visibility', 'hidden');
    });
    tl.addEventListener('click', function (ev) {
      var t = ev.target.closest('[data-step]');
      var s = (t && t !== tl) ? +t.dataset.step : nearest(data.waterfalls, stepAt(ev));
      if (s !== null) show(s);
    });
  }

  // Sort a table by a column; a cell without data-v (the section) restores the tree order.
  document.querySelectorAll('table.sortable th').forEach(function (th) {
    var i = th.cellIndex;
    th.addEventListener('click', function () {
      var body = th.closest('table').tBodies[0];
      var rows = Array.prototype.slice.call(body.rows);
      var dir = th.dataset.dir === 'asc' ? -1 : 1;
      th.dataset.dir = dir === 1 ? 'asc' : 'desc';
      rows.sort(function (a, b) {
        var x = a.cells[i].dataset.v, y = b.cells[i].dataset.v;
        if (x === undefined) return dir * a.dataset.order.localeCompare(b.dataset.order);
        return dir * ((+x) - (+y));
      });
      rows.forEach(function (r) { body.appendChild(r); });
    });
  });

  if (data.initial !== null) show(data.initial);
})();
