package idempotent_test

import (
	"context"
	"errors"
	"strings"
	"testing"

	"github.com/tablekeeper/tablekeeper/idempotent"
	"github.com/tablekeeper/tablekeeper/localstore"
)

type cellState struct {
	V, N int
}

// TestCell: two deliveries of one operation write one checkpoint. The
// first write is an insert; the one that loses it, and later the one whose
// If-Match loses, write nothing and take the winner's state; Check refuses
// a state it does not accept; a checkpoint cleared meanwhile is an error.
func TestCell(t *testing.T) {
	ctx := context.Background()
	cps := idempotent.Checkpoints{Tables: localstore.New(localstore.Options{}).Tables(), Table: "Checkpoints"}
	wrongVersion := errors.New("another version")
	cell := func() *idempotent.Cell[cellState] {
		return &idempotent.Cell[cellState]{Checkpoints: cps, Op: "op-1", Step: "copy", Check: func(s cellState) error {
			if s.V != 1 {
				return wrongVersion
			}
			return nil
		}}
	}
	a, b := cell(), cell()
	if _, found, err := a.Load(ctx); found || err != nil {
		t.Fatalf("Load of nothing: found %v, %v", found, err)
	}
	if now, won, err := a.Put(ctx, cellState{V: 1, N: 1}); !won || err != nil || now.N != 1 || a.ETag() == "" {
		t.Fatalf("the first insert: %+v, won %v, %v", now, won, err)
	}
	if now, won, err := b.Put(ctx, cellState{V: 1, N: 5}); won || err != nil || now.N != 1 {
		t.Fatalf("the second insert: %+v, won %v, %v; want a's state taken", now, won, err)
	}
	if now, won, err := b.Put(ctx, cellState{V: 1, N: 2}); !won || err != nil || now.N != 2 {
		t.Fatalf("b's save after taking a's: %+v, won %v, %v", now, won, err)
	}
	if now, won, err := a.Put(ctx, cellState{V: 1, N: 3}); won || err != nil || now.N != 2 {
		t.Fatalf("a's save on a stale ETag: %+v, won %v, %v; want b's state taken", now, won, err)
	}
	loaded := a.ETag()
	if got, found, err := cell().Load(ctx); !found || err != nil || got.N != 2 {
		t.Fatalf("Load: %+v, %v, %v", got, found, err)
	}
	if a.ETag() != loaded {
		t.Error("a Load by another cell changed this one's ETag")
	}

	if _, _, err := b.Put(ctx, cellState{V: 2}); err != nil {
		t.Fatal(err)
	}
	if _, _, err := cell().Load(ctx); !errors.Is(err, wrongVersion) {
		t.Fatalf("Load of a state Check refuses: %v", err)
	}
	if err := cps.Clear(ctx, "op-1", "copy"); err != nil {
		t.Fatal(err)
	}
	if _, _, err := a.Put(ctx, cellState{V: 1}); err == nil || !strings.Contains(err.Error(), "vanished") {
		t.Fatalf("a save after the checkpoint was cleared: %v, want it vanished", err)
	}
	if idempotent.Digest(cellState{V: 1, N: 2}) == idempotent.Digest(cellState{V: 1, N: 3}) || len(idempotent.Digest(cellState{})) != 64 {
		t.Error("Digest must tell other values apart and be hex SHA-256")
	}
}
