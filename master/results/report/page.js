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

  // An axis as wide as its longest tick label (uPlot's fixed 50 px let "150,000" run into the
  // axis label); the label is laid out beyond it.
  function axisSize(u, values, axisIdx, cycleNum) {
    var axis = u.axes[axisIdx];
    if (cycleNum > 1) { return axis._size; }  // the layout has settled: keep it
    var size = axis.ticks.size + axis.gap;
    var longest = (values || []).reduce(function (a, v) {
      return String(v).length > a.length ? String(v) : a;
    }, "");
    if (longest !== "") {
      u.ctx.font = axis.font[0];
      size += u.ctx.measureText(longest).width / (window.devicePixelRatio || 1);
    }
    return Math.ceil(size) + 2;
  }

  // The last point that has a value: the legend shows it while the cursor is off the chart
  // (a printout carries the values), hovering shows the point under the cursor.
  function lastIndex(data) {
    for (var i = data[0].length - 1; i >= 0; i--) {
      for (var j = 1; j < data.length; j++) {
        if (data[j][i] !== null && data[j][i] !== undefined) { return i; }
      }
    }
    return null;
  }

  function legendAtLast(last) {
    return {
      hooks: {
        setCursor: [function (u) {
          if (u.cursor.idx === null && last !== null && u.legend.idx !== last) {
            u.setLegend({ idx: last });
          }
        }]
      }
    };
  }

  // The IOPS curve: each point named by its step, beside it.
  function pointNames(names) {
    return {
      hooks: {
        draw: [function (u) {
          if (!names) { return; }
          var ctx = u.ctx;
          ctx.save();
          ctx.font = Math.round(11 * (window.devicePixelRatio || 1)) + "px system-ui, sans-serif";
          ctx.fillStyle = "#333";
          for (var i = 0; i < names.length; i++) {
            var y = u.data[1][i] !== null ? u.data[1][i] : u.data[2][i];
            if (y === null || y === undefined) { continue; }
            ctx.fillText(names[i], u.valToPos(u.data[0][i], "x", true) + 6,
                         u.valToPos(y, "y", true) - 6);
          }
          ctx.restore();
        }]
      }
    };
  }

  function makeChart(box, chart, width) {
    var cap = document.createElement("figcaption");
    cap.textContent = chart.title + (chart.window ? "  (shaded: measurement window)" : "") +
      (chart.sparse && !chart.curve ? "  (a point per decision)" : "");
    box.appendChild(cap);
    var many = chart.series.length > 16;
    var hasY2 = chart.series.some(function (s) { return s.axis === "y2"; });
    var series = [{ label: chart.x_label }];
    var data = [chart.x];
    chart.series.forEach(function (s) {
      series.push({
        label: s.label, scale: s.axis, stroke: colour(s.group), width: many ? 1 : 1.5,
        dash: DASHES[s.dash % DASHES.length], spanGaps: !!chart.sparse,
        points: chart.sparse ? { show: true, size: 6, fill: colour(s.group) } : { show: false }
      });
      data.push(s.values);
    });
    var axes = [{ label: chart.x_label }, { label: chart.y_label, scale: "y", size: axisSize }];
    if (hasY2) {
      axes.push({ label: chart.y2_label, scale: "y2", side: 1, grid: { show: false },
                  size: axisSize });
    }
    var fromZero = { time: false, range: function (u, min, max) {
      return [0, chart.curve ? (max > 0 ? max * 1.15 : 1) : max];
    } };
    var zoomed = { on: false };
    var yRange = {
      range: function (u, min, max) {
        if (min === null || max === null) { return [0, 1]; }
        // a twentieth above the highest value, so a flat line does not run on the frame
        return zoomed.on || min < 0 ? [min, max] : [0, max > 0 ? max * 1.05 : 1];
      }
    };
    var scales = { x: chart.log_x ? { time: false, distr: 3 } : fromZero, y: yRange };
    if (hasY2) { scales.y2 = yRange; }
    var last = lastIndex(data);
    var opts = {
      width: width, height: 260, series: series, axes: axes, scales: scales,
      legend: { show: !many }, cursor: { drag: { x: true, y: false } },
      plugins: [windowBand(chart.window), legendAtLast(last), pointNames(chart.names)]
    };
    var plot = new uPlot(opts, data, box);
    if (last !== null && !many) { plot.setLegend({ idx: last }); }
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

  // A step's charts for rollup type ``rollup``: its instance charts of that type (those of
  // the page's rollup come with the step's own, which every rollup shows), then its own.
  function chartsOf(step, rollup, pageRollup) {
    if (rollup === pageRollup || !step.other[rollup]) { return step.charts; }
    var own = step.charts.filter(function (c) { return c.rollup === null; });
    return step.other[rollup].concat(own);
  }

  function draw() {
    var data = JSON.parse(document.getElementById("report-data").textContent);
    var root = document.documentElement;
    var drawn = 0, lost = 0;

    function put(holder, chart, width) {
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
    }

    function widthOf(holder) {
      return Math.max(480, Math.min(1100, (holder.clientWidth || 1000) - 20));
    }

    function steps(rollup) {
      data.steps.forEach(function (step) {
        var holder = document.getElementById("charts-" + step.id);
        holder.textContent = "";
        chartsOf(step, rollup, data.rollup).forEach(function (chart) {
          put(holder, chart, widthOf(holder));
        });
      });
      root.setAttribute("data-rollup-shown", rollup);
    }

    var curve = document.getElementById("charts-overview");
    if (curve && data.overview) { put(curve, data.overview, widthOf(curve)); }
    steps(data.rollup);
    var choice = document.getElementById("rollup-choice");
    if (choice) {
      choice.addEventListener("change", function () { steps(choice.value); });
    }
    root.setAttribute("data-charts-drawn", String(drawn));
    root.setAttribute("data-report-ready", "yes");
  }

  draw();
})();
