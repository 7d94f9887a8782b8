package archive

import (
	"errors"
	"fmt"
	"strings"

	"github.com/tablekeeper/tablekeeper/storeadapter"
	"github.com/tablekeeper/tablekeeper/tablepatterns/tableexport"
)

// Kind is the envelope kind of archive moves.
const Kind = "archive"

// Kind returns "archive".
func (Args) Kind() string { return Kind }

// Args are the arguments of an archive move (docs/archive.md documents
// them). Exactly one of To and ToBlob names the target; RK selects one
// entity, RKFrom/RKTo the half-open RowKey range [RKFrom, RKTo) of the
// partition in Azure's key order (storeadapter.CompareUTF16). A missing or
// empty RKFrom starts at the first row, a missing or empty RKTo runs to the
// last, but at least one of them must be present: args naming no row are
// refused, never taken for the whole partition.
type Args struct {
	Table  string  `json:"table"`
	To     string  `json:"to,omitempty"`
	ToBlob string  `json:"toBlob,omitempty"`
	PK     *string `json:"pk"`
	RK     *string `json:"rk,omitempty"`
	RKFrom *string `json:"rkFrom,omitempty"`
	RKTo   *string `json:"rkTo,omitempty"`
}

// Validate checks the arguments; each error names the field and the rule.
func (a Args) Validate() error {
	if err := fieldErr("table", storeadapter.ValidateTableName(a.Table)); err != nil {
		return err
	}
	switch {
	case a.To == "" && a.ToBlob == "":
		return errors.New("args.to: is required (or args.toBlob)")
	case a.To != "" && a.ToBlob != "":
		return errors.New("args.to and args.toBlob: give one, not both")
	case a.To != "":
		if err := fieldErr("to", storeadapter.ValidateTableName(a.To)); err != nil {
			return err
		}
		if strings.EqualFold(a.To, a.Table) {
			return fmt.Errorf("args.to: must differ from args.table (%s)", a.Table)
		}
	default:
		if _, _, err := a.blobTarget(); err != nil {
			return err
		}
	}
	if a.PK == nil {
		return errors.New("args.pk: is required")
	}
	if err := fieldErr("pk", storeadapter.ValidateKey("pk", *a.PK)); err != nil {
		return err
	}
	if err := a.validateRows(); err != nil {
		return err
	}
	if a.ToBlob == "" {
		return nil
	}
	_, prefix, _ := a.blobTarget() // validated above
	if a.RK == nil {
		// A range goes through the exporter: its names must fit.
		if err := tableexport.ValidateNames(prefix, a.Table); err != nil {
			return fmt.Errorf("args.toBlob: %w", err)
		}
		return nil
	}
	// The blob name of the one entity must fit Azure's limits.
	name := blobName(prefix, a.Table, *a.PK, *a.RK)
	if err := storeadapter.ValidateBlobName(name); err != nil {
		if len(name) > 60 {
			name = name[:30] + "…" + name[len(name)-30:]
		}
		return fmt.Errorf("args.toBlob: the blobs would be named like %s: %w", strings.ToValidUTF8(name, ""), err)
	}
	return nil
}

// validateRows checks rk, or the range [rkFrom, rkTo). At least one of
// rkFrom and rkTo must be present, so that a message that names no row is
// never taken for the whole partition; a missing or empty bound is open.
func (a Args) validateRows() error {
	ranged := a.RKFrom != nil || a.RKTo != nil
	switch {
	case a.RK != nil && ranged:
		return errors.New("args.rk: give rk for one entity or rkFrom/rkTo for a range, not both")
	case a.RK != nil && storeadapter.IsReserved(*a.RK):
		return fmt.Errorf("args.rk: must not start with %q, which is reserved for tablekeeper's own rows", storeadapter.ReservedPrefix)
	case a.RK != nil:
		return fieldErr("rk", storeadapter.ValidateKey("rk", *a.RK))
	case !ranged:
		return errors.New(`args.rk: is required, or args.rkFrom and/or args.rkTo for a range ("rkFrom":"" moves the whole partition)`)
	}
	from, to := a.rowRange()
	for field, bound := range map[string]string{"rkFrom": from, "rkTo": to} {
		if bound == "" { // an open end of the range
			continue
		}
		if err := fieldErr(field, storeadapter.ValidateKey(field, bound)); err != nil {
			return err
		}
	}
	if to != "" && storeadapter.CompareUTF16(from, to) >= 0 {
		return fmt.Errorf("args.rkTo: must be greater than rkFrom in Azure's key order (UTF-16 code units; the range is [rkFrom, rkTo)), got [%q, %q)", from, to)
	}
	return nil
}

// fieldErr prefixes a validation error with its args field.
func fieldErr(field string, err error) error {
	if err == nil {
		return nil
	}
	return fmt.Errorf("args.%s: %w", field, err)
}

func (a Args) rowRange() (from, to string) {
	if a.RKFrom != nil {
		from = *a.RKFrom
	}
	if a.RKTo != nil {
		to = *a.RKTo
	}
	return from, to
}

// blobTarget writes each entity as annotated JSON to its blobName.
type blobTarget struct {
	b             storeadapter.Blobs
	prefix, table string
	rounds        int
}

// blobName is the blob an entity is archived to:
// <prefix>/<table>/<pk>/<rk>.json, each key escaped by
// storeadapter.BlobNameSegment.
func blobName(prefix, table, pk, rk string) string {
	name := table + "/" + storeadapter.BlobNameSegment(pk) + "/" + storeadapter.BlobNameSegment(rk) + ".json"
	if prefix != "" {
		name = prefix + "/" + name
	}
	return name
}
