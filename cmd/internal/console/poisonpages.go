package console

import (
	"bytes"
	"context"
	"encoding/base64"
	"encoding/json"
	"errors"
	"fmt"
	"net/http"
	"strconv"
	"time"
	"unicode/utf8"

	"github.com/tablekeeper/tablekeeper/jobs"
	"github.com/tablekeeper/tablekeeper/poison"
	"github.com/tablekeeper/tablekeeper/storeadapter"
)

// pageSize is how many records a group's page lists.
const pageSize = 50

type groupsData struct {
	Groups []poison.Group
	Total  int
	// Drops counts the jobs dropped because their transaction never
	// committed (not failures: no record to requeue).
	Drops     int
	DropsMore bool
}

// poisonGroups lists the queue's poisoned records by kind and failure
// class.
func (c *Console) poisonGroups(w http.ResponseWriter, r *http.Request) {
	ctx, cancel := c.ctx(r)
	defer cancel()
	q, in, recs, ok := c.poisoned(ctx, w, r)
	if !ok {
		return
	}
	d := groupsData{Groups: poison.GroupRecords(recs), Total: len(recs)}
	var err error
	if d.Drops, d.DropsMore, err = in.CountDrops(ctx, maxDrops); err != nil {
		c.fail(w, r, http.StatusBadGateway, err)
		return
	}
	c.render(w, r, http.StatusOK, "poison", page{Title: "Poison: " + q, Nav: "poison", Queue: q, Data: d})
}

// poisoned returns the request's queue, its inspector and its poisoned
// records, or writes the error page and returns false.
func (c *Console) poisoned(ctx context.Context, w http.ResponseWriter, r *http.Request) (string, *poison.Inspector, []poison.Record, bool) {
	q, in, ok := c.inspector(w, r)
	if !ok {
		return "", nil, nil, false
	}
	recs, err := in.List(ctx, "")
	if err != nil {
		c.fail(w, r, http.StatusBadGateway, err)
		return "", nil, nil, false
	}
	return q, in, recs, true
}

type groupData struct {
	Group   string
	Known   []string // the groups there are, when Group has no records
	Records []poison.Record
	Total   int
	Page    int
	Pages   int
}

// poisonGroup lists one group's records, newest first, a page at a time.
func (c *Console) poisonGroup(w http.ResponseWriter, r *http.Request) {
	ctx, cancel := c.ctx(r)
	defer cancel()
	q, _, recs, ok := c.poisoned(ctx, w, r)
	if !ok {
		return
	}
	name := r.FormValue("group")
	d := groupData{Group: name}
	for _, rec := range recs {
		if poison.GroupName(rec) == name {
			d.Records = append(d.Records, rec)
		}
	}
	if len(d.Records) == 0 {
		for _, g := range poison.GroupRecords(recs) {
			d.Known = append(d.Known, g.Name)
		}
	}
	d.Total = len(d.Records)
	d.Pages = max(1, (d.Total+pageSize-1)/pageSize)
	d.Page, _ = strconv.Atoi(r.FormValue("page"))
	d.Page = min(max(d.Page, 1), d.Pages)
	lo := (d.Page - 1) * pageSize
	d.Records = d.Records[lo:min(lo+pageSize, d.Total)]
	c.render(w, r, http.StatusOK, "group", page{Title: "Group " + name, Nav: "poison", Queue: q, Data: d})
}

type recordData struct {
	Record poison.Record
	Group  string
	// Envelope is the original, pretty-printed, when it decodes; else
	// EnvelopeErr says why and Decoded is the original's base64 decoding,
	// when it is text.
	Envelope    string
	Args        string
	Outbox      *jobs.OutboxRef
	EnvelopeErr string
	Decoded     string
	Attempts    []attemptRow
	// History are the other records of the same operation, newest first.
	History []poison.Record
}

type attemptRow struct {
	poison.Attempt
	// Offset is the time since the first attempt.
	Offset time.Duration
}

// poisonRecord shows one record: its envelope and args, its attempts as a
// timeline, the original, and the other records of its operation.
func (c *Console) poisonRecord(w http.ResponseWriter, r *http.Request) {
	q, in, ok := c.inspector(w, r)
	if !ok {
		return
	}
	ctx, cancel := c.ctx(r)
	defer cancel()
	rec, others, err := in.Lookup(ctx, r.FormValue("id"))
	switch {
	case errors.Is(err, storeadapter.ErrNotFound):
		c.fail(w, r, http.StatusNotFound, fmt.Errorf("no poison record %q on queue %s", r.FormValue("id"), q))
		return
	case errors.Is(err, storeadapter.ErrInvalidInput):
		c.fail(w, r, http.StatusBadRequest, err)
		return
	case err != nil:
		c.fail(w, r, http.StatusBadGateway, err)
		return
	}
	d := recordData{Record: rec, Group: poison.GroupName(rec), History: others}
	if env, err := jobs.DecodeEnvelope(rec.Original); err != nil {
		d.EnvelopeErr = err.Error()
		d.Decoded = decodedText(rec.Original)
	} else {
		d.Outbox = env.Outbox
		d.Envelope = pretty(env)
		if len(env.Args) > 0 {
			d.Args = prettyRaw(env.Args)
		}
	}
	for _, a := range rec.Attempts {
		d.Attempts = append(d.Attempts, attemptRow{Attempt: a, Offset: a.Time.Sub(rec.Attempts[0].Time)})
	}
	c.render(w, r, http.StatusOK, "record", page{Title: "Record " + rec.MessageID, Nav: "poison", Queue: q, Data: d})
}

// decodedText is the base64 decoding of s when it is one and decodes to
// text; else "".
func decodedText(s string) string {
	b, err := base64.StdEncoding.DecodeString(s)
	if err != nil || len(b) == 0 || !utf8.Valid(b) {
		return ""
	}
	var v any
	if json.Unmarshal(b, &v) == nil {
		return prettyRaw(b)
	}
	return string(b)
}

func pretty(v any) string {
	b, err := json.MarshalIndent(v, "", "  ")
	if err != nil {
		return fmt.Sprint(v)
	}
	return string(b)
}

func prettyRaw(raw []byte) string {
	var b bytes.Buffer
	if json.Indent(&b, raw, "", "  ") != nil {
		return string(raw)
	}
	return b.String()
}
