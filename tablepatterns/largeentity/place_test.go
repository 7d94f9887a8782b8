package largeentity_test

import (
	"bytes"
	"context"
	"crypto/sha256"
	"encoding/hex"
	"strings"
	"testing"

	"github.com/tablekeeper/tablekeeper/localstore"
	"github.com/tablekeeper/tablekeeper/storeadapter"
	"github.com/tablekeeper/tablekeeper/tablepatterns/largeentity"
)

// offloaded puts value as the blob of property p of table/pk/rk (the
// managed layout, container c) and returns the reference's string.
func offloaded(t *testing.T, store storeadapter.Store, c, table, pk, rk, p string, value any) string {
	t.Helper()
	ctx := context.Background()
	data, typ := []byte(nil), storeadapter.EdmString.String()
	switch v := value.(type) {
	case string:
		data = []byte(v)
	case []byte:
		data, typ = v, storeadapter.EdmBinary.String()
	}
	sum := sha256.Sum256(data)
	ref := largeentity.Ref{V: largeentity.RefVersion, Container: c, Name: largeentity.BlobName("", table, pk, rk, p, hex.EncodeToString(sum[:])),
		Length: int64(len(data)), ContentType: largeentity.ContentTypeString, SHA256: hex.EncodeToString(sum[:]), Type: typ, Mode: largeentity.ModeOffload}
	if err := store.Container(c).Create(ctx); err != nil {
		t.Fatal(err)
	}
	etag, err := store.Container(c).Put(ctx, ref.Name, data, storeadapter.PutOptions{})
	if err != nil {
		t.Fatal(err)
	}
	ref.ETag = etag
	return ref.String()
}

// TestEmbedThenPlace is an export and a restore of a row with offloaded
// properties whose blobs are gone by the time of the restore: Embed puts
// the values beside their references, Place puts them back in blobs under
// the new table's names, and Get reads the row whole.
func TestEmbedThenPlace(t *testing.T) {
	ctx := context.Background()
	src := localstore.New(localstore.Options{})
	text := strings.Repeat("größer ", 5000)
	bin := bytes.Repeat([]byte{0, 1, 2, 255}, 3000)
	e := storeadapter.Entity{PartitionKey: "p", RowKey: "r", Properties: map[string]any{
		"Keep":                         "small",
		largeentity.RefPrefix + "T":    offloaded(t, src, "big", "Orders", "p", "r", "T", text),
		largeentity.RefPrefix + "B":    offloaded(t, src, "big", "Orders", "p", "r", "B", bin),
		largeentity.RefPrefix + "Gone": offloaded(t, src, "big", "Orders", "p", "r", "Gone", "lost"),
	}}
	goneRef, _, _ := largeentity.RefOf(e, "Gone")
	if err := src.Container("big").Delete(ctx, goneRef.Name, ""); err != nil {
		t.Fatal(err)
	}
	line, n, err := largeentity.Embed(ctx, src, e)
	if err != nil || n != 2 {
		t.Fatalf("Embed: %d embedded, %v; want 2", n, err)
	}
	if line.Properties["T"] != text || !bytes.Equal(line.Properties["B"].([]byte), bin) || line.Properties[largeentity.RefPrefix+"T"] == nil {
		t.Fatalf("Embed: the values must sit beside their references: %v", keys(line))
	}
	if _, ok := line.Properties["Gone"]; ok {
		t.Fatal("Embed: a reference whose blob is gone must stay a reference only")
	}
	if _, ok := e.Properties["T"]; ok {
		t.Fatal("Embed changed its argument")
	}

	// The restore's account has none of the source's blobs.
	dst := localstore.New(localstore.Options{})
	layout := largeentity.Layout{{Table: "Restored", Container: "kept", Prefix: "lp"}}
	out, placed, err := largeentity.Place(ctx, src, dst, layout, line, "Restored")
	if err != nil {
		t.Fatal(err)
	}
	if placed != (largeentity.Placed{Blobs: 2, Embedded: 2, Dangling: 1}) {
		t.Fatalf("Place counted %+v, want 2 blobs, 2 embedded, 1 dangling", placed)
	}
	for _, p := range []string{"T", "B"} {
		if _, inline := out.Properties[p]; inline {
			t.Fatalf("Place left %s inline", p)
		}
		ref, _, err := largeentity.RefOf(out, p)
		if err != nil || ref.Container != "kept" || !strings.HasPrefix(ref.Name, "lp/Restored/") {
			t.Fatalf("Place: %s's reference %+v (%v) must name a blob of Restored in the declared container", p, ref, err)
		}
	}
	if out.Properties[largeentity.RefPrefix+"Gone"] != e.Properties[largeentity.RefPrefix+"Gone"] {
		t.Fatal("Place must keep a dangling reference as the source held it")
	}
	if err := dst.Tables().CreateTable(ctx, "Restored"); err != nil {
		t.Fatal(err)
	}
	delete(out.Properties, largeentity.RefPrefix+"Gone") // Get would fail on it, by design
	if _, err := dst.Tables().UpsertEntity(ctx, "Restored", out, storeadapter.Replace); err != nil {
		t.Fatal(err)
	}
	got, err := largeentity.Get(ctx, dst, "Restored", "p", "r")
	if err != nil {
		t.Fatal(err)
	}
	if got.Properties["T"] != text || !bytes.Equal(got.Properties["B"].([]byte), bin) || got.Properties["Keep"] != "small" {
		t.Fatalf("the restored row reads back as %v", keys(got))
	}

	// Placed again (a redelivery): the same names, nothing new.
	again, placed, err := largeentity.Place(ctx, src, dst, layout, line, "Restored")
	if err != nil || again.Properties[largeentity.RefPrefix+"T"] == nil || placed.Blobs != 2 {
		t.Fatalf("Place again: %+v, %v", placed, err)
	}
	r1, _, _ := largeentity.RefOf(out, "T")
	r2, _, _ := largeentity.RefOf(again, "T")
	if r1.Name != r2.Name {
		t.Fatalf("Place must be idempotent: %s then %s", r1.Name, r2.Name)
	}
}

// TestPlaceKeepsTheApplicationsValue: an inline P that is not its
// reference's content is a value the application wrote after the
// offload; it wins and the pair stays as it is. Attach references stay.
func TestPlaceKeepsTheApplicationsValue(t *testing.T) {
	ctx := context.Background()
	store := localstore.New(localstore.Options{})
	ref := offloaded(t, store, "big", "Orders", "p", "r", "T", "old content")
	att, _, _ := largeentity.RefOf(storeadapter.Entity{Properties: map[string]any{largeentity.RefPrefix + "A": offloaded(t, store, "app", "Orders", "p", "r", "A", "mine")}}, "A")
	att.Mode = largeentity.ModeAttach
	e := storeadapter.Entity{PartitionKey: "p", RowKey: "r", Properties: map[string]any{
		"T": "new content", largeentity.RefPrefix + "T": ref, largeentity.RefPrefix + "A": att.String()}}
	out, placed, err := largeentity.Place(ctx, store, store, nil, e, "Copy")
	if err != nil {
		t.Fatal(err)
	}
	if placed != (largeentity.Placed{}) || out.Properties["T"] != "new content" || out.Properties[largeentity.RefPrefix+"T"] != ref ||
		out.Properties[largeentity.RefPrefix+"A"] != att.String() {
		t.Fatalf("Place changed what it must keep: %+v %v", placed, out.Properties)
	}
	if emb, n, err := largeentity.Embed(ctx, store, e); err != nil || n != 0 || emb.Properties["T"] != "new content" {
		t.Fatalf("Embed must leave an inline value and an attach reference alone: %d, %v", n, err)
	}
}

// TestCarryRefusesAMissingBlob holds Carry's stricter rule: moving an
// entity whose blob is gone is an error naming the property.
func TestCarryRefusesAMissingBlob(t *testing.T) {
	ctx := context.Background()
	store := localstore.New(localstore.Options{})
	e := storeadapter.Entity{PartitionKey: "p", RowKey: "r", Properties: map[string]any{
		largeentity.RefPrefix + "T": offloaded(t, store, "big", "Orders", "p", "r", "T", "text")}}
	ref, _, _ := largeentity.RefOf(e, "T")
	if err := store.Container("big").Delete(ctx, ref.Name, ""); err != nil {
		t.Fatal(err)
	}
	if _, _, err := largeentity.Carry(ctx, store, nil, e, "Archive"); err == nil || !strings.Contains(err.Error(), "property T") {
		t.Fatalf("Carry of a missing blob: %v, want an error naming property T", err)
	}
}

func keys(e storeadapter.Entity) []string {
	var out []string
	for k := range e.Properties {
		out = append(out, k)
	}
	return out
}
