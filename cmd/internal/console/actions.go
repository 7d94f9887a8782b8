package console

import (
	"context"
	"errors"
	"fmt"
	"net/http"
	"net/url"
	"slices"
	"strings"
	"time"

	"github.com/tablekeeper/tablekeeper/poison"
)

// action is one requeue, delete or purge as its forms post it.
type action struct {
	Verb  string // "requeue", "delete" or "purge"
	Queue string
	// IDs select records by message id; else Group (and for purge Older)
	// select them. A requeue or delete needs one of the two.
	IDs   []string
	Group string
	// Older is the purge's age choice (one of olderChoices).
	Older string
}

// olderChoices are the ages a purge offers: records whose last activity
// is older than this.
var olderChoices = []struct {
	Value, Label string
	D            time.Duration
}{
	{"0", "any age", 0},
	{"1h", "older than 1 hour", time.Hour},
	{"1d", "older than 1 day", 24 * time.Hour},
	{"7d", "older than 7 days", 7 * 24 * time.Hour},
	{"30d", "older than 30 days", 30 * 24 * time.Hour},
}

// maxPreview bounds the records a preview lists (the counts cover all).
const maxPreview = 20

// parseAction reads and checks an action form.
func (c *Console) parseAction(r *http.Request) (action, error) {
	a := action{Verb: r.PostFormValue("action"), Queue: r.PostFormValue("queue"), IDs: r.PostForm["id"],
		Group: r.PostFormValue("group"), Older: r.PostFormValue("older")}
	if _, ok := c.ins[a.Queue]; !ok {
		return a, fmt.Errorf("queue %q is not one this console shows", a.Queue)
	}
	switch a.Verb {
	case "requeue", "delete":
		if len(a.IDs) == 0 && a.Group == "" {
			return a, fmt.Errorf("%s: select records or a group", a.Verb)
		}
		if len(a.IDs) > 0 && a.Group != "" {
			return a, fmt.Errorf("%s: select records or a group, not both", a.Verb)
		}
	case "purge":
		if len(a.IDs) > 0 {
			return a, errors.New("purge selects by group and age, not by record: use delete for records")
		}
		if a.Older == "" {
			a.Older = "0"
		}
		if _, ok := olderDuration(a.Older); !ok {
			return a, fmt.Errorf("purge: age %q is not one of the choices", a.Older)
		}
	default:
		return a, fmt.Errorf("unknown action %q (requeue, delete or purge)", a.Verb)
	}
	return a, nil
}

func olderDuration(v string) (time.Duration, bool) {
	for _, o := range olderChoices {
		if o.Value == v {
			return o.D, true
		}
	}
	return 0, false
}

// String describes the action for the log and the pages.
func (a action) String() string {
	var sel string
	switch {
	case len(a.IDs) > 0:
		sel = fmt.Sprintf("%d selected record(s)", len(a.IDs))
	case a.Group != "":
		sel = "group " + a.Group
	default:
		sel = "every group"
	}
	if a.Verb == "purge" && a.Older != "0" {
		sel += ", last activity older than " + a.Older
	}
	return fmt.Sprintf("%s %s of queue %s", a.Verb, sel, a.Queue)
}

type previewData struct {
	Action  action
	Count   int
	Groups  []poison.Group
	Records []poison.Record
	More    int
	// Extra lists what else a purge removes (checkpoints, drop records).
	Extra string
}

// actionForm checks an action's post (its CSRF token, that actions are
// allowed, the action itself) and returns it, or writes the refusal.
func (c *Console) actionForm(w http.ResponseWriter, r *http.Request) (action, bool) {
	if !c.cfg.AllowActions {
		c.fail(w, r, http.StatusForbidden, errors.New("this console is read-only: start it with -allow-actions to requeue, delete or purge"))
		return action{}, false
	}
	if !c.checkForm(w, r) {
		return action{}, false
	}
	a, err := c.parseAction(r)
	if err != nil {
		c.fail(w, r, http.StatusBadRequest, err)
		return action{}, false
	}
	return a, true
}

// actionPreview runs the action's dry run and asks for confirmation.
func (c *Console) actionPreview(w http.ResponseWriter, r *http.Request) {
	a, ok := c.actionForm(w, r)
	if !ok {
		return
	}
	ctx, cancel := c.ctx(r)
	defer cancel()
	recs, extra, err := c.dryRun(ctx, a)
	if err != nil {
		c.fail(w, r, http.StatusBadGateway, err)
		return
	}
	d := previewData{Action: a, Count: len(recs), Groups: poison.GroupRecords(recs), Extra: extra}
	d.Records = recs[:min(len(recs), maxPreview)]
	d.More = len(recs) - len(d.Records)
	c.render(w, r, http.StatusOK, "preview", page{Title: "Confirm " + a.Verb, Nav: "poison", Queue: a.Queue, Data: d})
}

// dryRun returns the records the action would change, and for a purge
// what else it removes.
func (c *Console) dryRun(ctx context.Context, a action) ([]poison.Record, string, error) {
	in := c.ins[a.Queue]
	switch a.Verb {
	case "requeue":
		var skipped []string
		o := poison.RequeueOptions{IDs: a.IDs, All: len(a.IDs) == 0, Group: a.Group, DryRun: true,
			Skipped: func(r poison.Record, why string) { skipped = append(skipped, r.MessageID+": "+why) }}
		recs, err := in.Requeue(ctx, o)
		if len(skipped) > 0 {
			return recs, fmt.Sprintf("%d selected record(s) will not be requeued: %s", len(skipped), strings.Join(skipped[:min(len(skipped), 5)], "; ")), err
		}
		return recs, "", err
	case "delete":
		if len(a.IDs) > 0 {
			return c.deleteSelection(ctx, in, a)
		}
		fallthrough // a group: its purge, as 'poison delete -group'
	default:
		res, err := in.Purge(ctx, c.purgeOptions(a, true, nil))
		return res.Records, fmt.Sprintf("also %d drop record(s) and %d checkpoint(s)", res.Drops, res.Checkpoints), err
	}
}

// deleteSelection returns the records a delete of ids selects (any
// state). A group's delete is its purge (see dryRun), as the CLI's.
func (c *Console) deleteSelection(ctx context.Context, in *poison.Inspector, a action) ([]poison.Record, string, error) {
	var recs []poison.Record
	var missing []string
	for _, id := range a.IDs {
		rec, err := in.Show(ctx, id)
		if err != nil {
			missing = append(missing, id)
			continue
		}
		recs = append(recs, rec)
	}
	if len(missing) > 0 {
		return recs, fmt.Sprintf("%d selected id(s) have no record: %s", len(missing), strings.Join(missing[:min(len(missing), 5)], ", ")), nil
	}
	return recs, "", nil
}

func (c *Console) purgeOptions(a action, dryRun bool, progress func(poison.Progress)) poison.PurgeOptions {
	older, _ := olderDuration(a.Older) // checked by parseAction
	return poison.PurgeOptions{OlderThan: older, Group: a.Group, CheckpointTable: c.cfg.RangeCheckpointTable,
		DryRun: dryRun, Progress: progress}
}

// actionRun runs a confirmed action as a task and shows its progress.
func (c *Console) actionRun(w http.ResponseWriter, r *http.Request) {
	a, ok := c.actionForm(w, r)
	if !ok {
		return
	}
	who := c.who(r)
	attrs := []any{"action", a.Verb, "queue", a.Queue, "group", a.Group, "ids", loggedIDs(a.IDs), "older", a.Older, "who", who}
	back := "poison?queue=" + url.QueryEscape(a.Queue)
	t, running := c.tasks.start(changing, strings.ToUpper(a.Verb[:1])+a.Verb[1:]+" "+a.String(), who, back, func(ctx context.Context, t *task) ([]string, error) {
		c.cfg.Log.Info("console action", attrs...)
		lines, err := c.run(ctx, a, t)
		attrs := slices.Concat(attrs, []any{"result", strings.Join(lines, "; ")})
		if err != nil {
			c.cfg.Log.Warn("console action failed", append(attrs, "err", c.cfg.Redact(err.Error()))...)
		} else {
			c.cfg.Log.Info("console action done", attrs...)
		}
		return lines, err
	})
	if t == nil {
		c.busy(w, r, running)
		return
	}
	http.Redirect(w, r, c.cfg.Base+"tasks/"+t.ID, http.StatusSeeOther)
}

// maxLoggedIDs bounds the message ids an action's log line names.
const maxLoggedIDs = 20

// loggedIDs names the selected ids for the log: all of them up to
// maxLoggedIDs, then how many more.
func loggedIDs(ids []string) string {
	if len(ids) <= maxLoggedIDs {
		return strings.Join(ids, ",")
	}
	return fmt.Sprintf("%s,… (%d in all)", strings.Join(ids[:maxLoggedIDs], ","), len(ids))
}

// run carries an action out, reporting progress on t.
func (c *Console) run(ctx context.Context, a action, t *task) ([]string, error) {
	in := c.ins[a.Queue]
	switch a.Verb {
	case "requeue":
		var skipped []string
		recs, err := in.Requeue(ctx, poison.RequeueOptions{IDs: a.IDs, All: len(a.IDs) == 0, Group: a.Group,
			Skipped:  func(r poison.Record, why string) { skipped = append(skipped, r.MessageID+": "+why) },
			Progress: t.progress})
		lines := []string{fmt.Sprintf("requeued %d record(s)", len(recs))}
		if len(skipped) > 0 {
			lines = append(lines, fmt.Sprintf("skipped %d: %s", len(skipped), strings.Join(skipped[:min(len(skipped), 10)], "; ")))
		}
		return lines, err
	case "delete":
		if len(a.IDs) == 0 { // a group: its purge, as 'poison delete -group'
			res, err := in.Purge(ctx, c.purgeOptions(a, false, t.progress))
			return []string{fmt.Sprintf("deleted %d record(s)", len(res.Records))}, err
		}
		res, err := in.DeleteMany(ctx, poison.DeleteOptions{IDs: a.IDs, Progress: t.progress})
		lines := []string{fmt.Sprintf("deleted %d of %d record(s)", len(res.Deleted), len(a.IDs))}
		if len(res.NotFound) > 0 {
			lines = append(lines, fmt.Sprintf("%d had no record: %s", len(res.NotFound), loggedIDs(res.NotFound)))
		}
		return lines, err
	default:
		res, err := in.Purge(ctx, c.purgeOptions(a, false, t.progress))
		return []string{fmt.Sprintf("purged %d record(s), %d drop record(s), %d checkpoint(s)", len(res.Records), res.Drops, res.Checkpoints)}, err
	}
}
