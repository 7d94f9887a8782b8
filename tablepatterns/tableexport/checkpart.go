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
// manifest's count of lines, each an exported entity. A reader that must
// not use a damaged part (a restore) calls it before it uses anything of
// the part. A missing part wraps storeadapter.ErrNotFound, a part that
// differs ErrDamaged, both naming the part; a storage failure is returned
// wrapped as it is. Memory holds one line.
func CheckPart(ctx context.Context, b storeadapter.Blobs, mp ManifestPart) error {
	var lines int64
	st, err := scanPart(ctx, b, mp.Name, func([]byte, storeadapter.Entity) error { lines++; return nil })
	switch {
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
