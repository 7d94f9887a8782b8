package main

import (
	"context"
	"crypto/rand"
	"encoding/hex"
	"encoding/json"
	"flag"
	"fmt"
	"strings"
	"time"

	"github.com/tablekeeper/tablekeeper/jobs"
	"github.com/tablekeeper/tablekeeper/jobs/archive"
	"github.com/tablekeeper/tablekeeper/jobs/catalog"
	"github.com/tablekeeper/tablekeeper/storeadapter"
)

// archiveArgsFlags renames the archive args fields in validation errors to
// the flags that set them. Longer names come first: the replacer tries its
// pairs in order at each position.
var archiveArgsFlags = strings.NewReplacer(
	"envelope: id:", "-id:",
	"args.toBlob", "-to-blob",
	"args.table", "-table",
	"args.rkFrom", "-rk-from",
	"args.rkTo", "-rk-to",
	"args.rk", "-rk",
	"args.pk", "-pk",
	"args.to", "-to",
)

// runArchive enqueues one archive move built from flags. The args are
// validated by the archive kind's own parser and Validate, so the CLI and
// the worker apply one rule set, and nothing is sent when they are
// invalid.
func (m *Main) runArchive(ctx context.Context, args []string) error {
	var (
		c                                       common
		table, to, toBlob, pk, rk, rkFrom, rkTo string
		id                                      string
	)
	fs := m.newFlagSet("archive",
		"archive -table T (-to A | -to-blob container/prefix) -pk P (-rk R | -rk-from A [-rk-to B]) [-id ID] [flags]",
		"Enqueues an archive move: one entity (-rk) or the RowKey range [-rk-from, -rk-to) of partition -pk,\n"+
			"from table -table to table -to or to blobs under -to-blob. It prints the op id and the message id.", &c)
	fs.StringVar(&table, "table", "", "source table (required)")
	fs.StringVar(&to, "to", "", "target table (or -to-blob)")
	fs.StringVar(&toBlob, "to-blob", "", "target blobs: \"container\" or \"container/prefix\", no . or .. segments (or -to)")
	fs.StringVar(&pk, "pk", "", "PartitionKey (required)")
	fs.StringVar(&rk, "rk", "", "RowKey of the one entity to move (or -rk-from)")
	fs.StringVar(&rkFrom, "rk-from", "", "first RowKey of the range to move (\"\" for the first row)")
	fs.StringVar(&rkTo, "rk-to", "", "RowKey the range stops before (omit to run to the last row)")
	fs.StringVar(&id, "id", "", "operation id, 1-128 characters of A-Za-z0-9._:- (default: generated op-<UTC time>-<random>)")
	if err := m.parseNoArgs(fs, &c, args); err != nil {
		return err
	}
	set := map[string]bool{}
	fs.Visit(func(f *flag.Flag) { set[f.Name] = true })
	// Rules of the flags themselves; the rules of the args are the archive
	// kind's own (its Validate, through jobs.ParseArgs below).
	switch {
	case set["rk"] && set["rk-to"]:
		return usagef("-rk and -rk-to: give one, not both (-rk-to ends a range that starts at -rk-from)")
	case set["rk-to"] && !set["rk-from"]:
		return usagef("-rk-to: needs -rk-from (use -rk-from '' to start at the first row)")
	}

	a := archive.Args{Table: table, To: to, ToBlob: toBlob}
	if set["pk"] {
		a.PK = &pk
	}
	if set["rk"] {
		a.RK = &rk
	}
	if set["rk-from"] {
		a.RKFrom = &rkFrom
	}
	if set["rk-to"] {
		a.RKTo = &rkTo
	}
	return m.sendKind(ctx, &c, set["id"], id, a, archiveArgsFlags)
}

// sendKind sends the one job a describes under op id (a new one unless
// idGiven), checked as the worker will check it (kindMessage); an error
// of the args is a usage error, named by flags (field names to flags).
func (m *Main) sendKind(ctx context.Context, c *common, idGiven bool, id string, a jobs.Args, flags *strings.Replacer) error {
	if !idGiven {
		id = newOpID(m.now())
	}
	text, err := kindMessage(ctx, catalog.ArgsRegistry(nil), id, a)
	if err != nil {
		return usagef("%s", flags.Replace(err.Error()))
	}
	store, err := m.connect(c)
	if err != nil {
		return err
	}
	return m.sendOne(ctx, c, store, id, text)
}

// kindMessage returns the message text of one job of a's kind under op id
// id, decoded back through reg as the worker would decode it (the kind's
// own Validate), so nothing is sent that the worker refuses on sight.
func kindMessage(ctx context.Context, reg *jobs.Registry, id string, a jobs.Args) (string, error) {
	raw, err := json.Marshal(a)
	if err != nil {
		return "", err
	}
	text, err := jobs.Encode(jobs.Envelope{V: 1, ID: id, Kind: a.Kind(), Args: raw})
	if err != nil {
		return "", err
	}
	if _, err := reg.Decode(ctx, storeadapter.Message{Text: text}); err != nil {
		return "", err
	}
	return text, nil
}

// sendOne sends the message text of operation id to the work queue
// (creating the queue when missing) and prints the op id and the message
// id.
func (m *Main) sendOne(ctx context.Context, c *common, store storeadapter.Store, id, text string) error {
	sent, err := sendCreating(ctx, store.Queue(c.queue), text)
	if err != nil {
		return fmt.Errorf("op %s: %w", id, err)
	}
	if c.json() {
		return writeJSON(m.Stdout, struct {
			OpID      string `json:"opId"`
			MessageID string `json:"messageId"`
		}{id, sent.ID})
	}
	tw := newTable(m.Stdout)
	row(tw, "OP ID", "MESSAGE ID", "QUEUE")
	row(tw, id, sent.ID, c.queue)
	return tw.Flush()
}

// newOpID returns a fresh operation id: "op-", the UTC time to the second
// and 8 random hex digits, such as "op-20261121T100000Z-1f3a9c0b".
func newOpID(now time.Time) string {
	var b [4]byte
	rand.Read(b[:]) // never fails (crypto/rand crashes the program instead)
	return "op-" + now.UTC().Format("20060102T150405Z") + "-" + hex.EncodeToString(b[:])
}
