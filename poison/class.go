package poison

import (
	"cmp"
	"slices"
	"strings"
	"time"
)

// Failure classes: what kind of failure poisoned a record, stable across
// records that differ only in keys, counts or hosts. Class derives them
// from the stored texts, so records written before classes existed get one
// too.
const (
	// ClassValidation: the message or its arguments are malformed or
	// invalid. It cannot succeed unchanged.
	ClassValidation = "validation"
	// ClassTooLarge: a payload, entity or message exceeded a limit.
	ClassTooLarge = "too-large"
	// ClassNotFound: something the operation needs does not exist.
	ClassNotFound = "not-found"
	// ClassForbidden: storage refused the credentials or permissions.
	ClassForbidden = "forbidden"
	// ClassUnavailable: storage failed, timed out or was unreachable.
	ClassUnavailable = "unavailable"
	// ClassConflict: a concurrent change kept winning (ETag, conflict).
	ClassConflict = "conflict"
	// ClassPanic: the handler panicked.
	ClassPanic = "panic"
	// ClassDequeueCount: the message was delivered too often and the last
	// error says nothing more specific.
	ClassDequeueCount = "dequeue-count"
	// ClassOther: none of the above.
	ClassOther = "other"
)

// Classes returns every failure class, in the order of the constants.
func Classes() []string {
	return []string{ClassValidation, ClassTooLarge, ClassNotFound, ClassForbidden, ClassUnavailable, ClassConflict,
		ClassPanic, ClassDequeueCount, ClassOther}
}

// classRules map words of an error text (lower case) to a class; the first
// rule with a matching word wins.
var classRules = []struct {
	class string
	words []string
}{
	{ClassPanic, []string{"handler panic", "panic:"}},
	{ClassTooLarge, []string{"too large", "toolarge", "exceeds the", "http 413"}},
	{ClassValidation, []string{"envelope:", "invalid input", "unknown field", "is required", "given twice", ": must ", "give one, not both"}},
	{ClassNotFound, []string{"does not exist", "not found", "notfound", "http 404"}},
	{ClassForbidden, []string{"forbidden", "authorization", "http 401", "http 403"}},
	{ClassUnavailable, []string{"unavailable", "serverbusy", "timeout", "timed out", "deadline exceeded", "connection refused", "http 500", "http 503", "http 504"}},
	{ClassConflict, []string{"precondition failed", "conflict", "already exists", "being deleted", "http 409", "http 412",
		"kept changing", "changed by another writer", "held by another entity"}},
}

// classify returns the class of one error text.
func classify(text string) string {
	text = strings.ToLower(text)
	for _, r := range classRules {
		for _, w := range r.words {
			if strings.Contains(text, w) {
				return r.class
			}
		}
	}
	return ClassOther
}

// Class returns a record's failure class (one of the Class constants),
// derived from its reason. A message poisoned by its delivery count
// (reasons "dequeue count N reached the maximum M; last error: …" and
// "delivered N times, more than the maximum M …") takes the class of its
// last specific error: the one the reason names, else the record's
// LastError, else its last recorded attempt's; ClassDequeueCount when
// none of them says more. A failing record, which has no reason yet, is
// classed by its last error.
func Class(r Record) string {
	text := cmp.Or(r.Reason, r.LastError)
	if !strings.HasPrefix(text, "dequeue count ") && !strings.HasPrefix(text, "delivered ") {
		return classify(text)
	}
	var last []string
	for _, sep := range []string{"last error:", "last recorded error"} {
		if _, after, ok := strings.Cut(text, sep); ok {
			last = append(last, after)
		}
	}
	last = append(last, r.LastError)
	if n := len(r.Attempts); n > 0 {
		last = append(last, r.Attempts[n-1].Error)
	}
	for _, t := range last {
		if c := classify(t); c != ClassOther {
			return c
		}
	}
	return ClassDequeueCount
}

// GroupName returns the group a record belongs to: "<kind>/<class>", or
// the class alone when the envelope did not decode (no kind).
func GroupName(r Record) string {
	if r.Kind == "" {
		return Class(r)
	}
	return r.Kind + "/" + Class(r)
}

// Group is the records that share a kind and a failure class.
type Group struct {
	// Name is the records' GroupName, which Requeue and Purge select by.
	Name string
	// Kind and Class make the name.
	Kind, Class string
	// Count is how many records are in the group.
	Count int
	// Newest and Oldest are the latest and the earliest LastAttempt among
	// them.
	Newest, Oldest time.Time
	// Example is the reason of the group's newest record.
	Example string
}

// GroupRecords groups records by GroupName with counts, the largest group
// first (ties: the newest first, then by name).
func GroupRecords(records []Record) []Group {
	byName := map[string]*Group{}
	var groups []*Group
	for _, r := range records {
		name := GroupName(r)
		g := byName[name]
		if g == nil {
			g = &Group{Name: name, Kind: r.Kind, Class: Class(r)}
			byName[name] = g
			groups = append(groups, g)
		}
		g.Count++
		if g.Count == 1 || r.LastAttempt.After(g.Newest) {
			g.Newest, g.Example = r.LastAttempt, r.Reason
		}
		if g.Count == 1 || r.LastAttempt.Before(g.Oldest) {
			g.Oldest = r.LastAttempt
		}
	}
	out := make([]Group, 0, len(groups))
	for _, g := range groups {
		out = append(out, *g)
	}
	slices.SortFunc(out, func(a, b Group) int {
		return cmp.Or(cmp.Compare(b.Count, a.Count), b.Newest.Compare(a.Newest), cmp.Compare(a.Name, b.Name))
	})
	return out
}
