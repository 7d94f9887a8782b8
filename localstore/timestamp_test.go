package localstore_test

import (
	"context"
	"testing"
	"time"

	"github.com/tablekeeper/tablekeeper/internal/clock"
	"github.com/tablekeeper/tablekeeper/localstore"
	"github.com/tablekeeper/tablekeeper/storeadapter"
)

// TestTimestampGrowsWithEveryWrite checks that an entity's Timestamp grows
// with each write even while a fake clock stands still, as on Azure, where
// the ETag derives from it: archive copies use it as the source's version.
func TestTimestampGrowsWithEveryWrite(t *testing.T) {
	ctx := context.Background()
	clock := clock.NewFake(time.Date(2026, 11, 21, 9, 30, 0, 0, time.UTC))
	s := localstore.New(localstore.Options{Clock: clock})
	tb := s.Tables()
	if err := tb.CreateTable(ctx, "Versions"); err != nil {
		t.Fatal(err)
	}
	e := storeadapter.Entity{PartitionKey: "p", RowKey: "r", Properties: map[string]any{"V": int32(1)}}
	writes := []func() error{
		func() error { _, err := tb.InsertEntity(ctx, "Versions", e); return err },
		func() error { _, err := tb.UpsertEntity(ctx, "Versions", e, storeadapter.Replace); return err },
		func() error { _, err := tb.UpsertEntity(ctx, "Versions", e, storeadapter.Merge); return err },
		func() error {
			_, err := tb.UpdateEntity(ctx, "Versions", e, storeadapter.Replace, storeadapter.ETagAny)
			return err
		},
		func() error {
			return tb.Transact(ctx, "Versions", []storeadapter.TableOp{{Action: storeadapter.TxUpsertReplace, Entity: e}})
		},
	}
	var last time.Time
	for i, write := range writes {
		if err := write(); err != nil {
			t.Fatalf("write %d: %v", i, err)
		}
		got, err := tb.GetEntity(ctx, "Versions", "p", "r")
		if err != nil {
			t.Fatal(err)
		}
		if i > 0 && !got.Timestamp.After(last) {
			t.Fatalf("write %d left Timestamp %v, not after the previous %v", i, got.Timestamp, last)
		}
		last = got.Timestamp
	}
	if want := clock.Now().Add(time.Duration(len(writes)-1) * 100 * time.Nanosecond); !last.Equal(want) {
		t.Errorf("last Timestamp %v, want %v (the clock plus one 100 ns tick per write)", last, want)
	}
}
