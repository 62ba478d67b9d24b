// ivypy report: draws the charts of the page's JSON (#report-data) with uPlot (inlined above).
// Marks what it did on the root element: data-charts-drawn (charts made), data-charts-failed
// (charts that threw: each says so in its place, and the rest are still drawn),
// data-report-ready; errors go to the recorder in <head> (data-script-errors, #script-errors).
(function () {
  "use strict";
  var DASHES = [[], [7, 4], [2, 3], [1, 5]];

  function colour(group) {
    return "hsl(" + Math.round((group * 137.508) % 360) + ", 65%, 42%)";
  }

  function windowBand(win) {
    return {
      hooks: {
        drawClear: [function (u) {
          if (!win) { return; }
          var x0 = u.valToPos(win[0], "x", true), x1 = u.valToPos(win[1], "x", true);
          var ctx = u.ctx;
          ctx.save();
          ctx.fillStyle = "rgba(40, 120, 240, 0.10)";
          ctx.fillRect(x0, u.bbox.top, x1 - x0, u.bbox.height);
          ctx.restore();
        }]
      }
    };
  }

  // Several instances' latency lines: show all percentiles, or one (a series' dash is the
  // index of its percentile).
  function percentileChoice(plot, chart) {
    var label = document.createElement("label");
    label.className = "note";
    label.textContent = "show ";
    var select = document.createElement("select");
    ["all percentiles"].concat(chart.percentiles).forEach(function (text, i) {
      var option = document.createElement("option");
      option.value = String(i - 1);
      option.textContent = text;
      select.appendChild(option);
    });
    select.addEventListener("change", function () {
      var want = Number(select.value);
      plot.batch(function () {
        chart.series.forEach(function (s, i) {
          plot.setSeries(i + 1, { show: want < 0 || s.dash === want });
        });
      });
    });
    label.appendChild(select);
    return label;
  }

  // The y axis starts at zero, so a dip of 25 % does not read as a crash; a chart's "zoom"
  // box fits it to the values instead (its lowest to its highest).
  function zoomChoice(plot, zoomed) {
    var label = document.createElement("label");
    label.className = "note zoom";
    var box = document.createElement("input");
    box.type = "checkbox";
    box.addEventListener("change", function () {
      zoomed.on = box.checked;
      plot.setData(plot.data);  // ranges again, by the new rule
    });
    label.appendChild(box);
    label.appendChild(document.createTextNode(" zoom (y fitted to the values, not from 0)"));
    return label;
  }

  function makeChart(box, chart, width) {
    var cap = document.createElement("figcaption");
    cap.textContent = chart.title + (chart.window ? "  (shaded: measurement window)" : "");
    box.appendChild(cap);
    var many = chart.series.length > 16;
    var hasY2 = chart.series.some(function (s) { return s.axis === "y2"; });
    var series = [{ label: chart.x_label }];
    var data = [chart.x];
    chart.series.forEach(function (s) {
      series.push({
        label: s.label, scale: s.axis, stroke: colour(s.group), width: many ? 1 : 1.5,
        dash: DASHES[s.dash % DASHES.length], spanGaps: false, points: { show: false }
      });
      data.push(s.values);
    });
    var axes = [{ label: chart.x_label }, { label: chart.y_label, scale: "y" }];
    if (hasY2) {
      axes.push({ label: chart.y2_label, scale: "y2", side: 1, grid: { show: false } });
    }
    var fromZero = { time: false, range: function (u, min, max) { return [0, max]; } };
    var zoomed = { on: false };
    var yRange = {
      range: function (u, min, max) {
        if (min === null || max === null) { return [0, 1]; }
        return zoomed.on || min < 0 ? [min, max] : [0, max > 0 ? max : 1];
      }
    };
    var scales = { x: chart.log_x ? { time: false, distr: 3 } : fromZero, y: yRange };
    if (hasY2) { scales.y2 = yRange; }
    var opts = {
      width: width, height: 260, series: series, axes: axes, scales: scales,
      legend: { show: !many }, cursor: { drag: { x: true, y: false } },
      plugins: [windowBand(chart.window)]
    };
    var plot = new uPlot(opts, data, box);
    box.uplot = plot;  // for a test's probe
    if (!chart.log_x) { box.insertBefore(zoomChoice(plot, zoomed), plot.root); }
    if (chart.percentiles.length) { box.insertBefore(percentileChoice(plot, chart), plot.root); }
    if (many) {
      var note = document.createElement("p");
      note.className = "note";
      note.textContent = chart.series.length + " series: legend left out.";
      box.appendChild(note);
    }
  }

  // A chart that throws says so in its place and goes to the error recorder (reportError, or
  // a throw from a timer, raises the window's error event without stopping this loop); the
  // others are drawn.
  function failed(box, err) {
    var note = document.createElement("p");
    note.className = "note chart-failed";
    note.textContent = "This chart could not be drawn: " + String(err && err.message || err);
    box.appendChild(note);
    if (window.reportError) {
      window.reportError(err);
    } else {
      setTimeout(function () { throw err; }, 0);
    }
  }

  function draw() {
    var data = JSON.parse(document.getElementById("report-data").textContent);
    var root = document.documentElement;
    var drawn = 0, lost = 0;
    data.steps.forEach(function (step) {
      var holder = document.getElementById("charts-" + step.id);
      var width = Math.max(480, Math.min(1100, (holder.clientWidth || 1000) - 20));
      step.charts.forEach(function (chart) {
        var box = document.createElement("figure");
        box.className = "chart";
        holder.appendChild(box);
        try {
          makeChart(box, chart, width);
          drawn += 1;
          root.setAttribute("data-charts-drawn", String(drawn));
        } catch (err) {
          lost += 1;
          root.setAttribute("data-charts-failed", String(lost));
          failed(box, err);
        }
      });
    });
    root.setAttribute("data-charts-drawn", String(drawn));
    root.setAttribute("data-report-ready", "yes");
  }

  draw();
})();
