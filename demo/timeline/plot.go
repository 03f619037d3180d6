package main

import (
	"encoding/csv"
	"fmt"
	"math"
	"os"
	"path/filepath"
	"strconv"
	"strings"
)

type point struct {
	t            float64
	cx, rq       float64
	sent, failed float64
	poolOpen     float64
}

type mark struct {
	t    float64
	name string
}

func readCSV(path string) ([][]string, error) {
	f, err := os.Open(path)
	if err != nil {
		return nil, err
	}
	defer f.Close()
	rows, err := csv.NewReader(f).ReadAll()
	if err != nil {
		return nil, fmt.Errorf("%s: %w", path, err)
	}
	if len(rows) < 2 {
		return nil, fmt.Errorf("%s: no data", path)
	}
	return rows[1:], nil
}

// plotDir reads series.csv and events.csv of dir and returns the SVG.
func plotDir(dir string) (string, error) {
	rows, err := readCSV(filepath.Join(dir, "series.csv"))
	if err != nil {
		return "", err
	}
	var pts []point
	for _, r := range rows {
		var v [6]float64
		for i := range v {
			if v[i], err = strconv.ParseFloat(r[i], 64); err != nil {
				return "", fmt.Errorf("series.csv: %w", err)
			}
		}
		pts = append(pts, point{v[0], v[1], v[2], v[3], v[4], v[5]})
	}
	rows, err = readCSV(filepath.Join(dir, "events.csv"))
	if err != nil {
		return "", err
	}
	var marks []mark
	for _, r := range rows {
		t, err := strconv.ParseFloat(r[0], 64)
		if err != nil {
			return "", fmt.Errorf("events.csv: %w", err)
		}
		marks = append(marks, mark{t, r[1]})
	}
	return plot(pts, marks), nil
}

// find is the time of the first mark whose name starts with prefix, or NaN.
func find(marks []mark, prefix string) float64 {
	for _, m := range marks {
		if strings.HasPrefix(m.name, prefix) {
			return m.t
		}
	}
	return math.NaN()
}

func esc(s string) string {
	return strings.NewReplacer("&", "&amp;", "<", "&lt;", ">", "&gt;", `"`, "&quot;").Replace(s)
}

// plot draws the connections and requests over time above the termination's lanes: what Kubernetes does
// (endpoints), the preStop hook's drain phases, Envoy's SIGTERM and exit, and the grace period.
func plot(pts []point, marks []mark) string {
	const (
		w, h           = 960.0, 545.0
		left, right    = 100.0, 30.0
		top, chartH    = 50.0, 220.0
		laneTop, laneH = 305.0, 26.0
	)
	exit := find(marks, "Envoy exited")
	t0, t1 := math.Floor(pts[0].t), math.Ceil(exit+1)
	x := func(t float64) float64 { return left + (t-t0)/(t1-t0)*(w-left-right) }
	ymax := 1.0
	for _, p := range pts {
		ymax = math.Max(ymax, math.Max(p.cx, p.rq))
	}
	ymax = math.Ceil(ymax/10) * 10
	y := func(v float64) float64 { return top + chartH - v/ymax*chartH }

	var b strings.Builder
	fmt.Fprintf(&b, `<svg xmlns="http://www.w3.org/2000/svg" width="%g" height="%g" viewBox="0 0 %g %g" font-family="sans-serif" font-size="12">`+"\n", w, h, w, h)
	fmt.Fprintf(&b, `<rect width="%g" height="%g" fill="white"/>`+"\n", w, h)
	fmt.Fprintf(&b, `<text x="%g" y="18" font-size="14" font-weight="bold">One pod's termination in hook mode, recorded on a real Envoy (docs/timeline/run.txt)</text>`+"\n", left)

	// The clients still sending: endpoints propagating.
	if ep := find(marks, "endpoints removed"); !math.IsNaN(ep) {
		fmt.Fprintf(&b, `<rect x="%.1f" y="%g" width="%.1f" height="%g" fill="#fde2c4"/>`+"\n", x(0), top, x(ep)-x(0), chartH)
		fmt.Fprintf(&b, `<text x="%.1f" y="%g" font-size="11" fill="#a0521c">new requests still arrive</text>`+"\n", x(0)+3, top+12)
	}
	// Axes and grid.
	for v := 0.0; v <= ymax; v += ymax / 5 {
		fmt.Fprintf(&b, `<line x1="%g" y1="%.1f" x2="%g" y2="%.1f" stroke="#ddd"/><text x="%g" y="%.1f" text-anchor="end">%g</text>`+"\n", left, y(v), w-right, y(v), left-6, y(v)+4, v)
	}
	for t := t0; t <= t1; t++ {
		fmt.Fprintf(&b, `<line x1="%.1f" y1="%g" x2="%.1f" y2="%g" stroke="#999"/><text x="%.1f" y="%g" text-anchor="middle">%gs</text>`+"\n", x(t), top+chartH, x(t), top+chartH+4, x(t), top+chartH+17, t)
	}
	fmt.Fprintf(&b, `<line x1="%g" y1="%g" x2="%g" y2="%g" stroke="black"/>`+"\n", left, top+chartH, w-right, top+chartH)

	// The series (Envoy's gauges; -1: Envoy gone, drawn as 0).
	// The legend sits in the chart's middle, where a drain's series are flat (between the open connections
	// and the requests in flight), clear of the event lines at the start and the end.
	lx := left + (w-left-right)*0.4
	line := func(get func(point) float64, color, label string, ly float64) {
		var path []string
		for _, p := range pts {
			v := math.Max(get(p), 0)
			path = append(path, fmt.Sprintf("%.1f,%.1f", x(p.t), y(v)))
		}
		fmt.Fprintf(&b, `<polyline fill="none" stroke="%s" stroke-width="2" points="%s"/>`+"\n", color, strings.Join(path, " "))
		fmt.Fprintf(&b, `<line x1="%.1f" y1="%g" x2="%.1f" y2="%g" stroke="%s" stroke-width="2"/><text x="%.1f" y="%g">%s</text>`+"\n", lx, ly, lx+20, ly, color, lx+25, ly+4, esc(label))
	}
	line(func(p point) float64 { return p.cx }, "#1f77b4", "connections open (downstream_cx_active)", top+chartH*0.4)
	line(func(p point) float64 { return p.rq }, "#2ca02c", "requests in flight (downstream_rq_active)", top+chartH*0.4+16)
	var failed float64
	for _, p := range pts {
		failed = math.Max(failed, p.failed)
	}
	fmt.Fprintf(&b, `<text x="%.1f" y="%g">Envoy's gauges, every 100 ms; failed requests: %g</text>`+"\n", lx+25, top+chartH*0.4+36, failed)

	// Lanes.
	// A segment too narrow for its label has it written after it.
	lane := func(i int, from, to float64, color, label string) {
		if math.IsNaN(from) || math.IsNaN(to) {
			return
		}
		ly := laneTop + float64(i)*(laneH+4)
		width := math.Max(x(to)-x(from), 1)
		fmt.Fprintf(&b, `<rect x="%.1f" y="%g" width="%.1f" height="%g" fill="%s"/>`+"\n", x(from), ly, width, laneH, color)
		lx := x(from) + 3
		if width < 40 {
			lx = x(from) + width + 3
		}
		fmt.Fprintf(&b, `<text x="%.1f" y="%g" font-size="11">%s</text>`+"\n", lx, ly+laneH/2+4, esc(label))
	}
	names := []string{"Kubernetes", "preStop hook", "Envoy", "grace period"}
	for i, n := range names {
		fmt.Fprintf(&b, `<text x="%g" y="%g" text-anchor="end" font-weight="bold">%s</text>`+"\n", left-6, laneTop+float64(i)*(laneH+4)+laneH/2+4, n)
	}
	hook := find(marks, "preStop hook starts")
	hc := find(marks, "health checks fail")
	floor := find(marks, "min_duration ended")
	quiet := find(marks, "quiet ended")
	released := find(marks, "released")
	sigterm := find(marks, "hook returned")
	lane(0, 0, find(marks, "endpoints removed"), "#fdd0a2", "endpoints removed (propagating)")
	floorLabel := "floor (--min-drain-duration)"
	if x(quiet)-x(floor) < 40 {
		floorLabel += "; the quiet period was met at its end"
		lane(1, hook, hc, "#c6dbef", "")
		lane(1, hc, floor, "#9ecae1", floorLabel)
		lane(1, floor, quiet, "#6baed6", "")
	} else {
		lane(1, hook, hc, "#c6dbef", "")
		lane(1, hc, floor, "#9ecae1", floorLabel)
		lane(1, floor, quiet, "#6baed6", "quiet period")
	}
	lane(1, quiet, released, "#4292c6", "wait for in-flight")
	lane(2, t0, hc, "#a1d99b", "serving")
	lane(2, hc, sigterm, "#c7e9c0", "health checks fail: /ready 503, responses close; still serving")
	lane(2, sigterm, exit, "#e6550d", "SIGTERM → exit")
	grace := find(marks, "grace period ends")
	gy := laneTop + 3*(laneH+4)
	fmt.Fprintf(&b, `<rect x="%.1f" y="%g" width="%.1f" height="%g" fill="#eee"/>`+"\n", x(0), gy, x(t1)-x(0), laneH)
	fmt.Fprintf(&b, `<text x="%.1f" y="%g" font-size="11">terminationGracePeriodSeconds %gs: kubelet's SIGKILL at %gs, off the chart → (Envoy exited at %.1fs)</text>`+"\n", x(0)+3, gy+laneH/2+4, grace, grace, exit)

	// Events: dashed lines through the chart and a numbered legend below.
	// Marks closer than 16 px share one badge, their numbers joined.
	var legend []string
	n := 0
	lastX := math.Inf(-1)
	var badge []string
	flush := func() {
		if len(badge) > 0 {
			fmt.Fprintf(&b, `<rect x="%.1f" y="%g" width="%d" height="14" rx="7" fill="#333"/><text x="%.1f" y="%g" fill="white" font-size="10" text-anchor="middle">%s</text>`+"\n",
				lastX-float64(len(strings.Join(badge, ",")))*3-4, top-13, len(strings.Join(badge, ","))*6+8, lastX, top-2.5, strings.Join(badge, ","))
		}
		badge = nil
	}
	for _, m := range marks {
		if m.t > t1 {
			continue
		}
		n++
		if x(m.t)-lastX > 16 {
			flush()
			lastX = x(m.t)
			fmt.Fprintf(&b, `<line x1="%.1f" y1="%g" x2="%.1f" y2="%g" stroke="#555" stroke-dasharray="3,3"/>`+"\n", x(m.t), top, x(m.t), laneTop+3*(laneH+4))
		}
		badge = append(badge, strconv.Itoa(n))
		legend = append(legend, fmt.Sprintf("%d  %.3fs  %s", n, m.t, m.name))
	}
	flush()
	for i, l := range legend {
		col, row := i/((len(legend)+1)/2), i%((len(legend)+1)/2)
		fmt.Fprintf(&b, `<text x="%g" y="%g" font-size="11">%s</text>`+"\n", left+float64(col)*420, laneTop+4*(laneH+4)+14+float64(row)*15, esc(l))
	}
	b.WriteString("</svg>\n")
	return b.String()
}
