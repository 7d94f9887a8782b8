package storeadapter

import (
	"errors"
	"fmt"
)

// Key is an entity's keys.
type Key struct {
	PK string `json:"pk"`
	RK string `json:"rk"`
}

// Compare orders keys as the service does: by PartitionKey, then RowKey,
// in UTF-16 code units (CompareUTF16).
func (k Key) Compare(o Key) int {
	if c := CompareUTF16(k.PK, o.PK); c != 0 {
		return c
	}
	return CompareUTF16(k.RK, o.RK)
}

// Range is what a scan of application data reads (an export, a purge):
// a table, or one partition of it, or a half-open RowKey range [RKFrom,
// RKTo) of one partition in Azure's key order (CompareUTF16). A nil or
// empty bound is open.
type Range struct {
	Table  string
	PK     *string
	RKFrom *string
	RKTo   *string
}

// Validate checks the range; each error names the field ("table", "pk",
// "rkFrom", "rkTo") and the rule, so a caller can prefix it with its own
// name for the field ("args.").
func (s Range) Validate() error {
	if err := ValidateTableName(s.Table); err != nil {
		return fmt.Errorf("table: %w", err)
	}
	if s.PK != nil {
		if err := ValidateKey("pk", *s.PK); err != nil {
			return fmt.Errorf("pk: %w", err)
		}
	}
	from, to := s.Bounds()
	if s.PK == nil && (from != "" || to != "") {
		return errors.New("pk: is required with rkFrom or rkTo (a RowKey range lies in one partition)")
	}
	for _, b := range []struct{ field, v string }{{"rkFrom", from}, {"rkTo", to}} {
		if b.v == "" {
			continue
		}
		if err := ValidateKey(b.field, b.v); err != nil {
			return fmt.Errorf("%s: %w", b.field, err)
		}
	}
	if to != "" && CompareUTF16(from, to) >= 0 {
		return fmt.Errorf("rkTo: must be greater than rkFrom in Azure's key order (UTF-16 code units; the range is [rkFrom, rkTo)), got [%q, %q)", from, to)
	}
	return nil
}

// Bounds returns the RowKey range's bounds, "" where open.
func (s Range) Bounds() (from, to string) {
	if s.RKFrom != nil {
		from = *s.RKFrom
	}
	if s.RKTo != nil {
		to = *s.RKTo
	}
	return from, to
}

// Filter selects the range's application rows strictly after the key
// after (nil: from the start), built with storeadapter's filter functions
// only. tablekeeper's reserved rows (ReservedPrefix: index
// entries, membership records, outbox rows) are never part of a range:
// the service leaves them out (ApplicationRows).
func (s Range) Filter(after *Key) Filter {
	var fs []Filter
	from, to := s.Bounds()
	if s.PK != nil {
		fs = append(fs, PartitionEquals(*s.PK))
		if from != "" {
			fs = append(fs, Compare("RowKey", Ge, from))
		}
		if to != "" {
			fs = append(fs, Compare("RowKey", Lt, to))
		}
	}
	switch {
	case after == nil:
	case s.PK != nil:
		fs = append(fs, Compare("RowKey", Gt, after.RK))
	default:
		// PartitionKey ge at the top level lets the service start the scan
		// at after's partition instead of the table's start.
		fs = append(fs, Compare("PartitionKey", Ge, after.PK), Or(Compare("PartitionKey", Gt, after.PK),
			Compare("RowKey", Gt, after.RK)))
	}
	return ApplicationRows(And(fs...))
}
