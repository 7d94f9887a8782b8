package main

import (
	"context"
	"crypto/sha256"
	"encoding/hex"
	"encoding/json"
	"fmt"
	"math"
	"os"
	"path/filepath"
	"reflect"
	"strings"
	"testing"
	"time"

	"github.com/tablekeeper/tablekeeper/cmd/internal/cli"
	"github.com/tablekeeper/tablekeeper/cmd/internal/cli/clitest"
	"github.com/tablekeeper/tablekeeper/jobs"
	"github.com/tablekeeper/tablekeeper/storeadapter"
	"github.com/tablekeeper/tablekeeper/storeadapter/azstore"
	"github.com/tablekeeper/tablekeeper/tablepatterns/largeentity"
	"github.com/tablekeeper/tablekeeper/test/azurite"
)

// TestCopyBetweenAzuriteAccounts runs the worker against one emulator (its
// own account, from $AZURE_STORAGE_CONNECTION_STRING) with a second one
// declared in the config's accounts section (a connection string in
// $DR_CS), and copies a table of every EDM type and awkward keys, in
// small pages, to it: every application row arrives with its typed values,
// no reserved row does, a row with an offloaded property gets a blob of its
// own in the second account, and no output shows the second account's key.
func TestCopyBetweenAzuriteAccounts(t *testing.T) {
	home, dr := azurite.ForTest(t), azurite.ForTest(t)
	ctx, cancel := context.WithTimeout(t.Context(), 2*time.Minute)
	defer cancel()
	homeStore, err := azstore.NewFromConnectionString(home.ConnectionString, nil)
	if err != nil {
		t.Fatal(err)
	}
	drStore, err := azstore.NewFromConnectionString(dr.ConnectionString, nil)
	if err != nil {
		t.Fatal(err)
	}
	if err := homeStore.Tables().CreateTable(ctx, "CopySrc"); err != nil {
		t.Fatal(err)
	}
	want := map[string]map[string]any{}
	keys := []string{"a b", "ü-umlaut", "it's", "~tilde", "z"}
	for i := range 40 {
		pk, rk := fmt.Sprintf("p%d %s", i%3, keys[i%len(keys)]), fmt.Sprintf("r%03d %s", i, keys[(i+1)%len(keys)])
		props := map[string]any{"S": "row " + rk, "I": int32(-i), "L": int64(math.MaxInt64 - int64(i)), "D": float64(i) + 0.25,
			"B": []byte{0, byte(i), 255}, "T": time.Date(2026, 11, 21, 10, 30, i, 1234500, time.UTC), "F": i%2 == 0,
			"G": storeadapter.GUID{byte(i), 1, 2, 3, 4, 5, 6, 7, 8, 9, 10, 11, 12, 13, 14, 15}}
		if i == 7 {
			props["N"] = math.Inf(-1)
		}
		if _, err := homeStore.Tables().InsertEntity(ctx, "CopySrc", storeadapter.Entity{PartitionKey: pk, RowKey: rk, Properties: props}); err != nil {
			t.Fatal(err)
		}
		want[pk+"/"+rk] = props
	}
	if _, err := homeStore.Tables().InsertEntity(ctx, "CopySrc", storeadapter.Entity{PartitionKey: "p0 a b", RowKey: storeadapter.ReservedPrefix + "m.x", Properties: map[string]any{"S": "reserved"}}); err != nil {
		t.Fatal(err)
	}
	bio := strings.Repeat("ünicode text of a large property ", 2000)
	sum := sha256.Sum256([]byte(bio))
	ref := largeentity.Ref{V: largeentity.RefVersion, Container: "big", Name: largeentity.BlobName("", "CopySrc", "p9", "large", "Bio", hex.EncodeToString(sum[:])),
		Length: int64(len(bio)), ContentType: largeentity.ContentTypeString, SHA256: hex.EncodeToString(sum[:]), Type: "Edm.String", Mode: largeentity.ModeOffload}
	if err := homeStore.Container("big").Create(ctx); err != nil {
		t.Fatal(err)
	}
	if ref.ETag, err = homeStore.Container("big").Put(ctx, ref.Name, []byte(bio), storeadapter.PutOptions{ContentType: ref.ContentType}); err != nil {
		t.Fatal(err)
	}
	if _, err := homeStore.Tables().InsertEntity(ctx, "CopySrc", storeadapter.Entity{PartitionKey: "p9", RowKey: "large",
		Properties: map[string]any{"S": "offloaded", largeentity.RefPrefix + "Bio": ref.String()}}); err != nil {
		t.Fatal(err)
	}
	q := homeStore.Queue("copies")
	if err := q.Create(ctx); err != nil {
		t.Fatal(err)
	}
	text, err := jobs.Encode(jobs.Envelope{V: 1, ID: "op-copy-azurite", Kind: "copy", Args: json.RawMessage(`{"table":"CopySrc","to":"dr","target":"CopyDst","mode":"replace"}`)})
	if err != nil {
		t.Fatal(err)
	}
	if _, err := q.Send(ctx, text, storeadapter.SendOptions{}); err != nil {
		t.Fatal(err)
	}
	t.Setenv(cli.EnvConnectionString, home.ConnectionString)
	t.Setenv(cli.EnvAccount, "")
	t.Setenv(cli.EnvSASToken, "")
	t.Setenv(cli.EnvQueue, "")
	t.Setenv("DR_CS", dr.ConnectionString)
	path := filepath.Join(t.TempDir(), "worker.json")
	if err := os.WriteFile(path, []byte(`{"accounts": {"dr": {"credential": "connection-string", "connectionStringEnv": "DR_CS"}},
  "copy": {"pageSize": 7, "partitions": 2}}`), 0o600); err != nil {
		t.Fatal(err)
	}
	out, errOut, err := runWorker(t, clitest.Form{}, "-config", path, "-queue", "copies", "-drain", "-drain-quiet", "1s", "-idle-max", "200ms", "-log-format", "json")
	if err != nil {
		t.Fatalf("worker: %v\n%s", err, errOut)
	}
	if !strings.Contains(errOut, `copied 41 rows of CopySrc (the worker's own account) to CopyDst (account \"dr\"): 41 written, 0 skipped`) {
		t.Errorf("the log lacks the copy's result:\n%s", errOut)
	}
	if strings.Contains(out+errOut, azurite.Key) || strings.Contains(out+errOut, dr.ConnectionString) {
		t.Errorf("the output shows the second account's key:\n%s", errOut)
	}
	got := map[string]map[string]any{}
	page, err := drStore.Tables().Query(ctx, "CopyDst", storeadapter.Query{})
	if err != nil || page.Next != "" {
		t.Fatalf("read CopyDst: %v (next %q)", err, page.Next)
	}
	for _, e := range page.Entities {
		if e.PartitionKey != "p9" {
			got[e.PartitionKey+"/"+e.RowKey] = e.Properties
		}
	}
	large, err := largeentity.Get(ctx, drStore, "CopyDst", "p9", "large")
	if err != nil || large.Properties["Bio"] != bio {
		t.Errorf("the offloaded row read in the second account: %v (Bio intact: %v)", err, large.Properties["Bio"] == bio)
	}
	if raw, err := drStore.Tables().GetEntity(ctx, "CopyDst", "p9", "large"); err != nil {
		t.Error(err)
	} else if r, _, _ := largeentity.RefOf(raw, "Bio"); !strings.HasPrefix(r.Name, "CopyDst/p9/large/Bio/") {
		t.Errorf("the copied row names blob %s, want one of its own key", r.Name)
	}
	if len(got) != len(want) {
		t.Errorf("CopyDst holds %d rows, want %d (no reserved row)", len(got), len(want))
	}
	for k, v := range want {
		if !reflect.DeepEqual(got[k], v) {
			t.Errorf("row %q = %#v, want %#v", k, got[k], v)
		}
	}
}
