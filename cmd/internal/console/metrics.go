package console

import (
	"context"
	"fmt"
	"html/template"
	"io"
	"maps"
	"net/http"
	"net/url"
	"slices"
	"strings"
	"sync"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	dto "github.com/prometheus/client_model/go"
	"github.com/prometheus/common/expfmt"
	"github.com/prometheus/common/model"

	"github.com/tablekeeper/tablekeeper/internal/clock"
)

// Source is one worker's metrics: its own registry when the console runs
// inside the worker, or its /metrics endpoint (URLSource).
type Source struct {
	// Name labels the source on the Overview.
	Name string
	prometheus.Gatherer
}

// URLSource reads a worker's /metrics endpoint (the text format) with hc
// (nil: a client with a 10 s timeout). The source is named by the URL
// without its query and with its password masked (url.URL.Redacted). Give
// one URL per worker, not one behind a load balancer: each reading must
// come from the same process.
func URLSource(raw string, hc *http.Client) Source {
	if hc == nil {
		hc = &http.Client{Timeout: 10 * time.Second}
	}
	name := raw
	if u, err := url.Parse(raw); err == nil {
		u.RawQuery, u.Fragment = "", ""
		name = u.Redacted()
	}
	return Source{Name: name, Gatherer: urlGatherer{url: raw, hc: hc}}
}

type urlGatherer struct {
	url string
	hc  *http.Client
}

// maxMetricsBytes bounds a metrics response read.
const maxMetricsBytes = 8 << 20

func (g urlGatherer) Gather() ([]*dto.MetricFamily, error) {
	resp, err := g.hc.Get(g.url)
	if err != nil {
		return nil, err
	}
	defer resp.Body.Close()
	if resp.StatusCode != http.StatusOK {
		return nil, fmt.Errorf("GET %s: %s", g.url, resp.Status)
	}
	p := expfmt.NewTextParser(model.UTF8Validation)
	fams, err := p.TextToMetricFamilies(io.LimitReader(resp.Body, maxMetricsBytes))
	if err != nil {
		return nil, fmt.Errorf("GET %s: %w", g.url, err)
	}
	out := make([]*dto.MetricFamily, 0, len(fams))
	for _, f := range fams {
		out = append(out, f)
	}
	return out, nil
}

// chartWindow is how far back the charts reach.
const chartWindow = time.Hour

// The charted series, from tablekeeper_jobs_finished_total{kind,outcome}:
// jobs that succeeded, that failed (retried or poisoned) and that saved
// their progress and continue later.
var seriesNames = []string{"succeeded", "failed", "continued"}

// seriesOf maps an outcome to its series ("" : not charted).
func seriesOf(outcome string) string {
	switch outcome {
	case "succeeded":
		return "succeeded"
	case "retried", "poisoned":
		return "failed"
	case "continued":
		return "continued"
	}
	return ""
}

// finishedMetric is the counter the charts read.
const finishedMetric = "tablekeeper_jobs_finished_total"

// totals are counter values by kind and series.
type totals map[string]map[string]float64

func (t totals) add(kind, series string, v float64) {
	if t[kind] == nil {
		t[kind] = map[string]float64{}
	}
	t[kind][series] += v
}

// point is what the sources that answered a reading added since their
// previous one: the gains, and the gains per minute of the time each
// source's gain took.
type point struct {
	at         time.Time
	gain, rate totals
}

// sourceReading is a source's last good reading.
type sourceReading struct {
	at     time.Time
	totals totals
}

// history keeps the last hour of points and each source's last reading.
type history struct {
	mu   sync.Mutex
	last map[string]sourceReading
	errs map[string]string
	pts  []point
}

type sourceState struct {
	Name, Err string
}

func newHistory() *history {
	return &history{last: map[string]sourceReading{}, errs: map[string]string{}}
}

// Run samples the metrics sources every SampleEvery until ctx ends. Without
// sources it returns at once.
func (c *Console) Run(ctx context.Context) error {
	if len(c.cfg.Metrics) == 0 {
		return nil
	}
	for {
		c.sample(c.cfg.Metrics, c.cfg.Clock.Now())
		if err := clock.Sleep(ctx, c.cfg.Clock, c.cfg.SampleEvery); err != nil {
			return nil
		}
	}
}

// sample reads every source once and records what the counters gained
// since each source's last good reading, and that gain per minute of the
// time between the two readings (so a source that missed readings does not
// make a spike). A counter that went down was reset (the worker restarted):
// its value is the gain, a lower bound. A source's first reading only sets
// its baseline; a reading no source answered adds no point.
func (c *Console) sample(sources []Source, now time.Time) {
	var wg sync.WaitGroup
	read := make([]totals, len(sources))
	errs := make([]error, len(sources))
	for i, s := range sources {
		wg.Go(func() { read[i], errs[i] = readTotals(s) })
	}
	wg.Wait()
	h := c.charts
	h.mu.Lock()
	defer h.mu.Unlock()
	p := point{at: now, gain: totals{}, rate: totals{}}
	answered := false
	for i, s := range sources {
		if errs[i] != nil {
			h.errs[s.Name] = c.cfg.Redact(errs[i].Error())
			continue
		}
		answered = true
		delete(h.errs, s.Name)
		prev, seen := h.last[s.Name]
		h.last[s.Name] = sourceReading{at: now, totals: read[i]}
		minutes := now.Sub(prev.at).Minutes()
		if !seen || minutes <= 0 {
			continue
		}
		for kind, series := range read[i] {
			for name, v := range series {
				d := v - prev.totals[kind][name]
				if d < 0 {
					d = v
				}
				if d > 0 {
					p.gain.add(kind, name, d)
					p.rate.add(kind, name, d/minutes)
				}
			}
		}
	}
	if !answered {
		return
	}
	h.pts = append(h.pts, p)
	cut := now.Add(-chartWindow)
	i := 0
	for i < len(h.pts) && h.pts[i].at.Before(cut) {
		i++
	}
	h.pts = slices.Delete(h.pts, 0, i)
}

// readTotals gathers a source and sums the charted counters.
func readTotals(s Source) (totals, error) {
	fams, err := s.Gather()
	if err != nil {
		return nil, err
	}
	t := totals{}
	for _, f := range fams {
		if f.GetName() != finishedMetric {
			continue
		}
		for _, m := range f.GetMetric() {
			var kind, outcome string
			for _, l := range m.GetLabel() {
				switch l.GetName() {
				case "kind":
					kind = l.GetValue()
				case "outcome":
					outcome = l.GetValue()
				}
			}
			if name := seriesOf(outcome); name != "" && kind != "" {
				t.add(kind, name, m.GetCounter().GetValue())
			}
		}
	}
	return t, nil
}

// Chart geometry, in SVG user units.
const (
	chartW, chartH = 480.0, 120.0
	chartPad       = 4.0
)

// draw returns one chart per kind that did anything in the window, the
// kinds in name order, and the sources with their last error.
func (h *history) draw(sources []Source, now time.Time) ([]chart, []sourceState) {
	h.mu.Lock()
	defer h.mu.Unlock()
	states := make([]sourceState, len(sources))
	for i, s := range sources {
		states[i] = sourceState{Name: s.Name, Err: h.errs[s.Name]}
	}

	kinds := map[string]bool{}
	for _, p := range h.pts {
		for k := range p.gain {
			kinds[k] = true
		}
	}
	var charts []chart
	for _, kind := range slices.Sorted(maps.Keys(kinds)) {
		charts = append(charts, h.chart(kind, now))
	}
	return charts, states
}

// chart draws one kind's series as polylines: jobs per minute over the
// last hour, the newest on the right.
func (h *history) chart(kind string, now time.Time) chart {
	top := 0.0
	sums := make([]float64, len(seriesNames))
	for _, p := range h.pts {
		for i, s := range seriesNames {
			sums[i] += p.gain[kind][s]
			top = max(top, p.rate[kind][s])
		}
	}
	if top == 0 {
		top = 1
	}
	x := func(t time.Time) float64 {
		return chartPad + (chartW-2*chartPad)*(1-now.Sub(t).Seconds()/chartWindow.Seconds())
	}
	y := func(v float64) float64 { return chartH - chartPad - (chartH-2*chartPad)*v/top }
	var b strings.Builder
	fmt.Fprintf(&b, `<svg class="chart" viewBox="0 0 %g %g" role="img" aria-label="%s: jobs per minute over the last hour">`, chartW, chartH, template.HTMLEscapeString(kind))
	fmt.Fprintf(&b, `<rect class="frame" x="0" y="0" width="%g" height="%g"/>`, chartW, chartH)
	for _, s := range seriesNames {
		fmt.Fprintf(&b, `<polyline class="s-%s" points="`, s)
		for _, p := range h.pts {
			fmt.Fprintf(&b, "%.1f,%.1f ", x(p.at), y(p.rate[kind][s]))
		}
		b.WriteString(`"/>`)
	}
	fmt.Fprintf(&b, `<text class="max" x="%g" y="12">%.3g/min</text>`, chartW-chartPad-70, top)
	b.WriteString(`</svg>`)
	c := chart{Kind: kind, SVG: template.HTML(b.String())} // numbers and series names only; kind escaped
	for i, s := range seriesNames {
		c.Totals = append(c.Totals, seriesTotal{Name: s, Value: sums[i]})
	}
	return c
}
