package restore_test

import (
	"context"
	"errors"
	"testing"

	"github.com/tablekeeper/tablekeeper/idempotent"
	"github.com/tablekeeper/tablekeeper/internal/clock"
	"github.com/tablekeeper/tablekeeper/jobs/restore"
	"github.com/tablekeeper/tablekeeper/storeadapter"
	"github.com/tablekeeper/tablekeeper/storeadapter/instrument"
	"github.com/tablekeeper/tablekeeper/tablepatterns/tableexport"
)

// TestPlanChecksItsJoinRead: a dry run (Plan) of an insert checks every
// part, then reads the parts again to join their keys with the target; a
// part whose bytes change between the two reads (one digit of its first
// line: same length, lines that parse) is refused at that read's end, as
// the restore's own read would refuse it, instead of counting from bytes
// the check never saw.
func TestPlanChecksItsJoinRead(t *testing.T) {
	e := newEnv(t)
	ctx := context.Background()
	b := e.raw.Container("exports")
	m, err := tableexport.Export(ctx, e.raw.Tables(), storeadapter.Range{Table: "Src"}, tableexport.Options{
		Blobs: b, Prefix: "plan", OpID: "op-plan",
		Checkpoints: idempotent.Checkpoints{Tables: e.raw.Tables(), Table: "ExportCheckpoints"}, Clock: clock.NewFake(t0)})
	if err != nil {
		t.Fatal(err)
	}
	args := restore.Args{Manifests: []string{"exports/" + m.Name}, Table: "Dst", Mode: restore.ModeInsert}
	if p, err := restore.Plan(ctx, e.store, args); err != nil || p.Write != m.Entities {
		t.Fatalf("plan of the export as written: %+v, %v; want %d rows to write", p, err, m.Entities)
	}
	victim := m.Parts[0]
	data, _, err := b.Get(ctx, victim.Name)
	if err != nil {
		t.Fatal(err)
	}
	swapped := swapDigit(data)
	opens := 0
	e.mu.Lock()
	e.fault = func(c instrument.Call) error {
		if c.Op == instrument.OpOpen && c.Blob == victim.Name {
			if opens++; opens == 2 { // 1: the check, 2: the join's read
				_, err := b.Put(ctx, victim.Name, swapped, storeadapter.PutOptions{})
				return err
			}
		}
		return nil
	}
	e.mu.Unlock()
	if _, err := restore.Plan(ctx, e.store, args); !errors.Is(err, tableexport.ErrDamaged) || opens != 2 {
		t.Errorf("plan with the part changed after its check: %v (the part opened %d times); want ErrDamaged at the second read", err, opens)
	}
}
