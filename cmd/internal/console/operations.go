package console

import (
	"cmp"
	"encoding/json"
	"errors"
	"fmt"
	"net/http"
	"slices"
	"strings"
	"time"

	"github.com/tablekeeper/tablekeeper/storeadapter"
)

// checkpointRow is one checkpoint: an operation's step and its position.
type checkpointRow struct {
	Table, OpID, Step string
	// Saved is when it was last written (the entity's Timestamp).
	Saved time.Time
	// Done is true when the checkpoint says its operation finished (kept
	// so that a late redelivery says "already done").
	Done bool
	// Progress lists the counters the checkpoint holds ("entities 1200",
	// "phase sweep"), or says what an opaque position is.
	Progress string
}

type operationsData struct {
	Rows []checkpointRow
	// Tables are the checkpoint tables read; Missing those not created yet.
	Tables, Missing []string
	// More is true when more than maxCheckpoints were found.
	More bool
}

// maxCheckpoints bounds the checkpoints the page reads (ten queries).
const maxCheckpoints = 10_000

// shownCheckpoints bounds the rows the page lists.
const shownCheckpoints = 500

// operations lists the checkpoints of long jobs: in progress first, the
// latest saved first.
func (c *Console) operations(w http.ResponseWriter, r *http.Request) {
	ctx, cancel := c.ctx(r)
	defer cancel()
	d := operationsData{Tables: c.cfg.CheckpointTables}
	read := 0
	for _, table := range c.cfg.CheckpointTables {
		q := storeadapter.Query{}
		for {
			p, err := c.cfg.Store.Tables().Query(ctx, table, q)
			if errors.Is(err, storeadapter.ErrNotFound) {
				d.Missing = append(d.Missing, table)
				break
			}
			if err != nil {
				c.fail(w, r, http.StatusBadGateway, err)
				return
			}
			for _, e := range p.Entities {
				d.Rows = append(d.Rows, checkpointOf(table, e))
			}
			read += len(p.Entities)
			if q.Continuation = p.Next; q.Continuation == "" {
				break
			}
			if read >= maxCheckpoints {
				d.More = true
				break
			}
		}
	}
	slices.SortFunc(d.Rows, func(a, b checkpointRow) int {
		if a.Done != b.Done {
			if a.Done {
				return 1
			}
			return -1
		}
		return cmp.Or(b.Saved.Compare(a.Saved), strings.Compare(a.OpID, b.OpID))
	})
	if len(d.Rows) > shownCheckpoints {
		d.Rows, d.More = d.Rows[:shownCheckpoints], true
	}
	c.render(w, r, http.StatusOK, "operations", page{Title: "Operations", Nav: "operations", Data: d})
}

// progressFields are the counters of the kinds' checkpoints worth showing,
// in this order: export and purgeday (tableexport), purge, index rebuild.
var progressFields = []string{"phase", "pass", "entities", "bytes", "partCount", "deleted", "pages", "batches", "index", "gen"}

// checkpointOf reads one checkpoint entity. Tokens that are JSON objects
// show their counters; others are positions.
func checkpointOf(table string, e storeadapter.Entity) checkpointRow {
	row := checkpointRow{Table: table, OpID: e.PartitionKey, Step: e.RowKey, Saved: e.Timestamp}
	tok, _ := e.Properties["Token"].(string)
	var fields map[string]any
	if json.Unmarshal([]byte(tok), &fields) != nil {
		row.Progress = "position saved"
		if tok == "" {
			row.Progress = "no position"
		}
		return row
	}
	row.Done, _ = fields["done"].(bool)
	var parts []string
	for _, f := range progressFields {
		switch v := fields[f].(type) {
		case float64:
			parts = append(parts, fmt.Sprintf("%s %.0f", f, v))
		case string:
			if v != "" {
				parts = append(parts, f+" "+v)
			}
		}
	}
	if res, ok := fields["res"].(map[string]any); ok { // an index rebuild's running result
		for _, f := range []string{"entities", "swept", "pruned"} {
			if v, ok := res[f].(float64); ok {
				parts = append(parts, fmt.Sprintf("%s %.0f", f, v))
			}
		}
	}
	row.Progress = strings.Join(parts, ", ")
	if row.Progress == "" {
		row.Progress = "position saved"
	}
	return row
}
