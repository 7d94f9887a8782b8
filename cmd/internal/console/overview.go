package console

import (
	"context"
	"errors"
	"html/template"
	"net/http"
	"sync"
	"time"

	"github.com/tablekeeper/tablekeeper/cmd/internal/telemetry"
	"github.com/tablekeeper/tablekeeper/poison"
	"github.com/tablekeeper/tablekeeper/storeadapter"
)

// queueRow is one work queue on the Overview.
type queueRow struct {
	Name, Poison string
	// Exists is false for a work queue not created yet.
	Exists bool
	// Messages and PoisonMessages are approximate counts.
	Messages, PoisonMessages int
	// Oldest and PoisonOldest are the ages of the oldest visible message
	// of each queue; 0 when none is visible (shown as "-").
	Oldest, PoisonOldest time.Duration
	// Dropped counts the drop records (up to maxDrops; DroppedMore says
	// there are more).
	Dropped     int
	DroppedMore bool
	// Err is why the queue could not be read.
	Err string
}

// maxDrops bounds the drop records counted per queue: one query reads
// 1,000.
const maxDrops = 10_000

type overviewData struct {
	Queues []queueRow
	// Charts are one SVG per kind; none without metrics sources.
	Charts []chart
	// Sources names the metrics sources and their last error.
	Sources []sourceState
	Window  time.Duration
}

type chart struct {
	Kind string
	SVG  template.HTML
	// Totals are the series' sums over the window.
	Totals []seriesTotal
}

type seriesTotal struct {
	Name  string
	Value float64
}

// overview reads every queue at once (three calls each, and the drop
// count) and draws the charts from the sampled metrics.
func (c *Console) overview(w http.ResponseWriter, r *http.Request) {
	ctx, cancel := c.ctx(r)
	defer cancel()
	rows := make([]queueRow, len(c.cfg.Queues))
	var wg sync.WaitGroup
	for i, q := range c.cfg.Queues {
		wg.Go(func() {
			row := queueRow{Name: q, Poison: poison.QueueName(q), Exists: true}
			s, err := telemetry.SampleQueues(ctx, c.cfg.Store.Queue(q), c.cfg.Store.Queue(row.Poison), c.cfg.Clock.Now)
			switch {
			case errors.Is(err, storeadapter.ErrNotFound):
				row.Exists = false
				n, perr := c.cfg.Store.Queue(row.Poison).ApproximateCount(ctx)
				if perr != nil && !errors.Is(perr, storeadapter.ErrNotFound) {
					row.Err = c.cfg.Redact(perr.Error())
				}
				row.PoisonMessages = n
			case err != nil:
				row.Err = c.cfg.Redact(err.Error())
			default:
				row.Messages, row.PoisonMessages, row.Oldest = s.Depth, s.PoisonDepth, s.Oldest
			}
			if row.Err == "" && row.PoisonMessages > 0 {
				row.PoisonOldest, err = c.oldest(ctx, row.Poison)
				if err != nil {
					row.Err = c.cfg.Redact(err.Error())
				}
			}
			if row.Err == "" {
				n, more, err := c.ins[q].CountDrops(ctx, maxDrops)
				if err != nil {
					row.Err = c.cfg.Redact(err.Error())
				}
				row.Dropped, row.DroppedMore = n, more
			}
			rows[i] = row
		})
	}
	wg.Wait()
	d := overviewData{Queues: rows, Window: chartWindow}
	if len(c.cfg.Metrics) > 0 {
		d.Charts, d.Sources = c.charts.draw(c.cfg.Metrics, c.cfg.Clock.Now())
	}
	c.render(w, r, http.StatusOK, "overview", page{Title: "Overview", Nav: "overview", Refresh: refreshFromQuery(r), Data: d})
}

// oldest is the age of the oldest visible message of queue q (one peek),
// 0 when none is visible.
func (c *Console) oldest(ctx context.Context, q string) (time.Duration, error) {
	msgs, err := c.cfg.Store.Queue(q).Peek(ctx, 1)
	if err != nil || len(msgs) == 0 {
		return 0, err
	}
	return c.cfg.Clock.Now().Sub(msgs[0].Inserted), nil
}

// refreshFromQuery is the ?refresh=N the Overview's auto-refresh link
// sets: 10, 30 or 60 seconds, else none.
func refreshFromQuery(r *http.Request) int {
	switch r.FormValue("refresh") {
	case "10":
		return 10
	case "30":
		return 30
	case "60":
		return 60
	}
	return 0
}
