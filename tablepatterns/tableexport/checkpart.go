package tableexport

import (
	"context"
	"errors"
	"fmt"

	"github.com/tablekeeper/tablekeeper/idempotent"
	"github.com/tablekeeper/tablekeeper/storeadapter"
)

// ErrDamaged is what CheckPart's error is (errors.Is) when a part does not
// match its manifest: another length, another SHA-256, another line count,
// or a line that does not parse.
var ErrDamaged = errors.New("does not match its manifest")

// CheckPart reads one listed part through once, as stored, and checks its
// length and SHA-256 against the manifest, and that it holds the
// manifest's count of lines. It does not parse the lines: bytes whose
// SHA-256 is the manifest's are the lines the export wrote (Verify parses
// them too). A reader that must not use a damaged part (a restore) calls
// it before it uses anything of the part. A missing part wraps
// storeadapter.ErrNotFound, a part that differs ErrDamaged, both naming
// the part; a storage failure is returned wrapped as it is. Memory holds
// one line.
func CheckPart(ctx context.Context, b storeadapter.Blobs, mp ManifestPart) error {
	return ReadCheckedPart(ctx, b, mp, nil)
}

// errOverCount stops ReadCheckedPart's scan at a line past the count.
var errOverCount = errors.New("more lines than the manifest says")

// ReadCheckedPart streams a listed part's entities to fn, as ReadPart
// does, and checks the very bytes they came from as CheckPart does, with
// the same errors. The verdict on length, SHA-256 and line count comes at
// the part's end, after fn has had every line; a line that does not parse
// stops the read before it, and so does a line past the manifest's count
// (fn never has more lines than the manifest lists). So an ErrDamaged
// from it means fn has been handed lines of a part that is not the
// manifest's: a reader that checked the part first (CheckPart) and reads
// it again to use it learns that it changed in between, and that what it
// did with the lines is suspect. An error from fn stops the read and is
// returned wrapped, never as ErrDamaged. Memory holds one line.
func ReadCheckedPart(ctx context.Context, b storeadapter.Blobs, mp ManifestPart, fn func(storeadapter.Entity) error) error {
	var fnErr error
	var handed int64
	over := false                                    // a line past the manifest's count came
	var each func([]byte, storeadapter.Entity) error // nil: CheckPart's counting alone
	if fn != nil {
		each = func(_ []byte, e storeadapter.Entity) error {
			if handed >= mp.Entities {
				over = true
				return errOverCount
			}
			handed++
			fnErr = fn(e)
			return fnErr
		}
	}
	st, err := scanPart(ctx, b, mp.Name, each)
	lines := st.lines
	if fn != nil {
		lines = handed // a line that does not parse is not a good one
	}
	switch {
	case fnErr != nil:
		return fmt.Errorf("tableexport: read part %s: %w", mp.Name, fnErr)
	case over:
		return fmt.Errorf("tableexport: part %s: more lines than the %d entities the manifest says (those were handed on, no more): %w",
			mp.Name, mp.Entities, ErrDamaged)
	case errors.Is(err, storeadapter.ErrNotFound) && !idempotent.Missing(err):
		return fmt.Errorf("tableexport: part %s: missing: %w", mp.Name, err)
	case err != nil && (storeadapter.IsTransient(err) || errors.Is(err, storeadapter.ErrForbidden) || ctx.Err() != nil || idempotent.Missing(err)):
		return fmt.Errorf("tableexport: part %s: %w", mp.Name, err)
	case err != nil:
		return fmt.Errorf("tableexport: part %s: unreadable after %d good lines (%v): %w", mp.Name, lines, err, ErrDamaged)
	case st.bytes != mp.Bytes:
		return fmt.Errorf("tableexport: part %s: %d bytes, the manifest says %d: %w", mp.Name, st.bytes, mp.Bytes, ErrDamaged)
	case st.sha256 != mp.SHA256:
		return fmt.Errorf("tableexport: part %s: SHA-256 %s, the manifest says %s: %w", mp.Name, st.sha256, mp.SHA256, ErrDamaged)
	case lines != mp.Entities:
		return fmt.Errorf("tableexport: part %s: %d lines, the manifest says %d entities: %w", mp.Name, lines, mp.Entities, ErrDamaged)
	}
	return nil
}
