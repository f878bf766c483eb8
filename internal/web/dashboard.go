package web

import (
	"fmt"
	"html/template"
	"math"
	"net/http"
	"net/url"
	"strconv"
	"strings"
	"time"

	"github.com/outpost-sh/outpost/api"
)

// The fleet dashboard: GET /v1/stats drawn as inline SVG charts, each
// with a table of its numbers, so the page reads without JavaScript and
// to a screen reader, and a test can compare what is drawn with the API.

// dashboardRefresh is how often app.js reloads the dashboard.
const dashboardRefresh = 60 * time.Second

// dashboardPage serves /ui/dashboard and /ui/fleet (?outpost=, ?window=)
// and /ui/outposts/{outpost}/dashboard.
func (h *Handler) dashboardPage(w http.ResponseWriter, r *http.Request) {
	outpost := r.PathValue("outpost")
	if outpost == "" {
		outpost = r.URL.Query().Get("outpost")
	}
	window := r.URL.Query().Get("window")
	if _, err := api.ParseStatsWindow(window); err != nil {
		window = ""
	}
	q := url.Values{}
	if outpost != "" {
		q.Set("outpost", outpost)
	}
	if window != "" {
		q.Set("window", window)
	}
	var st api.Stats
	if err := h.call(r, "GET", api.StatsPath+"?"+q.Encode(), nil, &st); err != nil {
		h.failAPI(w, r, err)
		return
	}
	var outposts api.OutpostList
	_ = h.call(r, "GET", "/v1/outposts", nil, &outposts) // only the picker needs it
	title := "Fleet dashboard"
	if st.Outpost != "" {
		title = "Dashboard of " + st.Outpost
	}
	var windows []map[string]any
	for _, win := range api.StatsWindows {
		wq := url.Values{"window": {win.Name}}
		if st.Outpost != "" {
			wq.Set("outpost", st.Outpost)
		}
		windows = append(windows, map[string]any{"Name": win.Name, "URL": "/ui/dashboard?" + wq.Encode(), "Current": win.Name == st.Window})
	}
	h.render(w, r, http.StatusOK, "dashboard", page{Title: title, Nav: "dashboard", Data: map[string]any{
		"Stats": st, "Outposts": outposts.Items, "Windows": windows,
		"Charts": dashboardCharts(st), "Refresh": int(dashboardRefresh / time.Second),
		"Summary": summarize(st),
	}})
}

// series is one line (or one layer of stacked bars) of a chart.
type series struct {
	Key, Name string
	Values    []float64
}

// chart is one plot of the dashboard and the table of its numbers.
type chart struct {
	ID, Title, Unit string
	// Stacked draws the series as stacked bars; else lines.
	Stacked bool
	Series  []series
	// Cap, when above 0, is drawn as a dashed line named CapName.
	Cap     float64
	CapName string
	// Times label the buckets.
	Times []string
	// SVG is the drawing.
	SVG template.HTML
	// Rows are the table's: a time and a formatted value per series.
	Rows [][]string
}

// dashboardCharts turns stats into the dashboard's charts.
func dashboardCharts(st api.Stats) []chart {
	col := func(f func(b api.StatsBucket) float64) []float64 {
		out := make([]float64, len(st.Buckets))
		for i, b := range st.Buckets {
			out[i] = f(b)
		}
		return out
	}
	times := make([]string, len(st.Buckets))
	layout := "15:04"
	if st.StepSeconds >= 3600 {
		layout = "Jan 2 15:04"
	}
	for i, b := range st.Buckets {
		times[i] = b.Start.UTC().Format(layout)
	}
	per := stepName(st.StepSeconds)
	charts := []chart{
		{ID: "queued", Title: "Queue depth (most waiting at once, per " + per + ")", Unit: "sessions", Series: []series{
			{"queued", "queued", col(func(b api.StatsBucket) float64 { return float64(b.Queued) })},
		}},
		{ID: "wait", Title: "Time waiting in the queue (sessions that started, per " + per + ")", Unit: "seconds", Series: []series{
			{"p50", "median", col(func(b api.StatsBucket) float64 { return b.Wait.P50 })},
			{"p90", "90th percentile", col(func(b api.StatsBucket) float64 { return b.Wait.P90 })},
		}},
		{ID: "ended", Title: "Sessions ended by outcome (per " + per + ")", Unit: "sessions", Stacked: true, Series: []series{
			{api.StatusExit, "finished (exit)", col(func(b api.StatsBucket) float64 { return float64(b.Ended[api.StatusExit]) })},
			{api.StatusError, "failed (error)", col(func(b api.StatsBucket) float64 { return float64(b.Ended[api.StatusError]) })},
		}},
		{ID: "running", Title: "Running sessions (most at once, per " + per + ")", Unit: "sessions", Series: []series{
			{"running", "running", col(func(b api.StatsBucket) float64 { return float64(b.Running) })},
		}, Cap: float64(st.MaxRunning), CapName: "max_running"},
		{ID: "workers", Title: "Workers (most live at once, per " + per + ")", Unit: "workers", Series: []series{
			{"workers", "workers", col(func(b api.StatsBucket) float64 { return float64(b.Workers) })},
			{"capacity", "session slots", col(func(b api.StatsBucket) float64 { return float64(b.Capacity) })},
		}},
		{ID: "utilization", Title: "Worker utilisation (share of session slots busy, per " + per + ")", Unit: "%", Series: []series{
			{"utilization", "busy", col(func(b api.StatsBucket) float64 { return math.Round(b.Utilization*1000) / 10 })},
		}},
		{ID: "duration", Title: "Session duration (sessions that ended, per " + per + ")", Unit: "seconds", Series: []series{
			{"p50", "median", col(func(b api.StatsBucket) float64 { return b.Duration.P50 })},
			{"p90", "90th percentile", col(func(b api.StatsBucket) float64 { return b.Duration.P90 })},
			{"p99", "99th percentile", col(func(b api.StatsBucket) float64 { return b.Duration.P99 })},
		}},
	}
	for i := range charts {
		c := &charts[i]
		c.Times = times
		c.SVG = drawChart(*c)
		for b := range times {
			row := []string{times[b]}
			for _, s := range c.Series {
				row = append(row, formatValue(s.Values[b]))
			}
			c.Rows = append(c.Rows, row)
		}
	}
	return charts
}

// summarize gives the window's totals in a few sentences' worth of
// numbers.
func summarize(st api.Stats) map[string]string {
	ended, exits := 0, 0
	for _, b := range st.Buckets {
		for _, n := range b.Ended {
			ended += n
		}
		exits += b.Ended[api.StatusExit]
	}
	hours := st.End.Sub(st.Start).Hours()
	out := map[string]string{
		"Ended":   strconv.Itoa(ended),
		"PerHour": formatValue(math.Round(float64(ended)/hours*10) / 10),
		"Span":    st.Start.UTC().Format("Jan 2 15:04") + " – " + st.End.UTC().Format("Jan 2 15:04") + " UTC",
		"Step":    stepName(st.StepSeconds),
	}
	if ended > 0 {
		out["Success"] = formatValue(math.Round(float64(exits)/float64(ended)*1000)/10) + "%"
	}
	return out
}

// stepName says a bucket's width in words.
func stepName(seconds int) string {
	d := time.Duration(seconds) * time.Second
	switch {
	case d == time.Minute:
		return "minute"
	case d%time.Hour == 0 && d > time.Hour:
		return fmt.Sprintf("%d hours", d/time.Hour)
	case d == time.Hour:
		return "hour"
	}
	return fmt.Sprintf("%d minutes", d/time.Minute)
}

// formatValue writes a number as the table and the titles show it: whole
// numbers bare, others with up to three decimals.
func formatValue(v float64) string {
	return strconv.FormatFloat(v, 'f', -1, 64)
}

// Chart geometry, in SVG user units.
const (
	chartW, chartH                       = 720, 220
	padLeft, padRight, padTop, padBottom = 56, 12, 12, 36
)

// drawChart draws c as an SVG: axes with labels, the series (lines with
// a point per bucket, or stacked bars), each point's value in a <title>
// and in data-value, and the cap as a dashed line.
func drawChart(c chart) template.HTML {
	n := len(c.Times)
	top := c.Cap
	for b := range n {
		sum := 0.0
		for _, s := range c.Series {
			if c.Stacked {
				sum += s.Values[b]
			} else {
				top = math.Max(top, s.Values[b])
			}
		}
		top = math.Max(top, sum)
	}
	top = niceCeil(top)
	plotW := float64(chartW - padLeft - padRight)
	plotH := float64(chartH - padTop - padBottom)
	slot := plotW / math.Max(float64(n), 1)
	x := func(b int) float64 { return padLeft + slot*(float64(b)+0.5) }
	y := func(v float64) float64 { return padTop + plotH - v/top*plotH }

	var sb strings.Builder
	e := template.HTMLEscapeString
	fmt.Fprintf(&sb, `<svg class="chart" id="chart-%s" data-chart="%s" viewBox="0 0 %d %d" role="img" aria-labelledby="chart-%s-title">`,
		e(c.ID), e(c.ID), chartW, chartH, e(c.ID))
	fmt.Fprintf(&sb, `<title id="chart-%s-title">%s, in %s</title>`, e(c.ID), e(c.Title), e(c.Unit))
	// Axes, gridlines and their labels.
	fmt.Fprintf(&sb, `<g class="axis" aria-hidden="true"><line x1="%d" y1="%d" x2="%d" y2="%d"/><line x1="%d" y1="%d" x2="%d" y2="%d"/>`,
		padLeft, padTop, padLeft, chartH-padBottom, padLeft, chartH-padBottom, chartW-padRight, chartH-padBottom)
	for _, f := range []float64{0, 0.5, 1} {
		v := top * f
		fmt.Fprintf(&sb, `<line class="grid" x1="%d" y1="%.1f" x2="%d" y2="%.1f"/><text x="%d" y="%.1f" text-anchor="end" dominant-baseline="middle">%s</text>`,
			padLeft, y(v), chartW-padRight, y(v), padLeft-6, y(v), e(formatValue(v)))
	}
	for _, b := range axisTicks(n) {
		fmt.Fprintf(&sb, `<text x="%.1f" y="%d" text-anchor="middle">%s</text>`, x(b), chartH-padBottom+16, e(c.Times[b]))
	}
	fmt.Fprintf(&sb, `<text x="%d" y="%d" text-anchor="end" class="unit">%s (UTC)</text></g>`, chartW-padRight, chartH-4, e(c.Unit))
	if c.Cap > 0 {
		fmt.Fprintf(&sb, `<line class="cap" data-cap="%s" x1="%d" y1="%.1f" x2="%d" y2="%.1f"><title>%s: %s</title></line>`,
			e(formatValue(c.Cap)), padLeft, y(c.Cap), chartW-padRight, y(c.Cap), e(c.CapName), e(formatValue(c.Cap)))
	}
	base := make([]float64, n)
	for i, s := range c.Series {
		fmt.Fprintf(&sb, `<g class="series s%d" data-series="%s">`, i, e(s.Key))
		if !c.Stacked {
			pts := make([]string, n)
			for b := range n {
				pts[b] = fmt.Sprintf("%.1f,%.1f", x(b), y(s.Values[b]))
			}
			fmt.Fprintf(&sb, `<polyline points="%s"/>`, strings.Join(pts, " "))
		}
		for b := range n {
			v := s.Values[b]
			tip := fmt.Sprintf("%s %s: %s %s", c.Times[b], s.Name, formatValue(v), c.Unit)
			if c.Stacked {
				fmt.Fprintf(&sb, `<rect data-bucket="%d" data-value="%s" x="%.1f" y="%.1f" width="%.1f" height="%.1f"><title>%s</title></rect>`,
					b, e(formatValue(v)), x(b)-slot*0.4, y(base[b]+v), slot*0.8, y(base[b])-y(base[b]+v), e(tip))
				base[b] += v
				continue
			}
			fmt.Fprintf(&sb, `<circle data-bucket="%d" data-value="%s" cx="%.1f" cy="%.1f" r="%.1f"><title>%s</title></circle>`,
				b, e(formatValue(v)), x(b), y(v), math.Min(3, math.Max(1.5, slot/3)), e(tip))
		}
		sb.WriteString(`</g>`)
	}
	sb.WriteString(`</svg>`)
	return template.HTML(sb.String()) //nolint:gosec // every value above is escaped
}

// niceCeil rounds v up to 1, 2 or 5 times a power of ten (1 at least), so
// the axis reads in round numbers.
func niceCeil(v float64) float64 {
	if v <= 1 {
		return 1
	}
	p := math.Pow(10, math.Floor(math.Log10(v)))
	for _, m := range []float64{1, 2, 5, 10} {
		if v <= m*p {
			return m * p
		}
	}
	return 10 * p
}

// axisTicks picks the buckets labelled on the time axis: about six,
// the first and the last among them.
func axisTicks(n int) []int {
	if n == 0 {
		return nil
	}
	every := max(1, (n+5)/6)
	var out []int
	for b := 0; b < n; b += every {
		out = append(out, b)
	}
	if out[len(out)-1] != n-1 && n-1-out[len(out)-1] >= every/2 {
		out = append(out, n-1)
	}
	return out
}
