package archive_test

import (
	"context"
	"errors"
	"fmt"
	"slices"
	"strings"
	"testing"

	"github.com/tablekeeper/tablekeeper/jobs"
	"github.com/tablekeeper/tablekeeper/jobs/archive"
	"github.com/tablekeeper/tablekeeper/jobs/kit"
	"github.com/tablekeeper/tablekeeper/storeadapter"
	"github.com/tablekeeper/tablekeeper/storeadapter/instrument"
	"github.com/tablekeeper/tablekeeper/tablepatterns/tableexport"
)

// smallParts gives the bundle an archive worker whose parts hold about
// 1 KiB of lines, so a few dozen rows make several parts.
func (b *archiveBundle) smallParts(t *testing.T) {
	t.Helper()
	var err error
	if b.arch, err = archive.New(kit.Plain(b.store), archive.Config{CheckpointTable: "Checkpoints", MaxPartBytes: 1024}); err != nil {
		t.Fatal(err)
	}
}

// runResult runs a job and returns its result text.
func (b *archiveBundle) runResult(t *testing.T, id, args string) (string, error) {
	t.Helper()
	parsed, err := jobs.ParseArgs[archive.Args]([]byte(args))
	if err != nil {
		t.Fatal(err)
	}
	ctx, res := jobs.WithResult(context.Background())
	err = b.arch.Work(ctx, &jobs.Job[archive.Args]{Envelope: jobs.Envelope{V: 1, ID: id, Kind: archive.Kind}, Args: parsed})
	return res.Text(), err
}

// manifestOf returns the manifest name a result text ends with.
func manifestOf(t *testing.T, res string) string {
	t.Helper()
	i, j := strings.Index(res, " to archive/"), strings.Index(res, ".json (")
	if i < 0 || j < 0 {
		t.Fatalf("result %q names no manifest", res)
	}
	return res[i+len(" to archive/") : j+len(".json")]
}

// TestArchiveRangeToBlob moves a range into export parts: exactly the
// range's rows, every EDM type intact, each once, in parts that verify;
// a redelivery changes nothing and says the same.
func TestArchiveRangeToBlob(t *testing.T) {
	b := newArchive(t)
	b.smallParts(t)
	for i := range 40 {
		b.insert(t, edmEntity("Sales", fmt.Sprintf("%05d", i)))
	}
	b.insert(t, edmEntity("Support", "00010"))
	want := b.all(t, "Employees")[5:30] // Sales 00005-00029
	args := `{"table":"Employees","toBlob":"archive/2026","pk":"Sales","rkFrom":"00005","rkTo":"00030"}`
	res, err := b.runResult(t, "op-rb", args)
	if err != nil {
		t.Fatal(err)
	}
	if !strings.HasPrefix(res, "archived 25 entities in ") || !strings.HasSuffix(res, "(25 deleted by this run)") {
		t.Fatalf("result %q", res)
	}
	rep, err := tableexport.Verify(context.Background(), b.store.Container("archive"), manifestOf(t, res))
	if err != nil || !rep.OK() || rep.Entities != 25 || rep.Parts < 3 {
		t.Fatalf("Verify = %+v, %v; want 25 entities in several parts, no problem", rep, err)
	}
	lines, err := rangeBlobLines(b)
	if err != nil {
		t.Fatal(err)
	}
	for _, w := range want {
		got := lines[w.RowKey]
		if len(got) != 1 || got[0].ETag != w.ETag {
			t.Fatalf("row %s: %d lines, want 1 with its ETag", w.RowKey, len(got))
		}
		assertSameProperties(t, w, got[0])
	}
	if len(lines) != 25 {
		t.Errorf("the parts hold %d rows, want 25", len(lines))
	}
	if left := keys(b.all(t, "Employees")); len(left) != 16 || slices.Contains(left, "Sales/00005") || !slices.Contains(left, "Support/00010") {
		t.Errorf("source holds %v, want the 15 Sales rows outside the range and Support's", left)
	}
	before := b.calls.Snapshot()
	again, err := b.runResult(t, "op-rb", args)
	if err != nil || again != strings.Replace(res, "(25 deleted", "(0 deleted", 1) {
		t.Fatalf("redelivery = %q, %v; want the same manifest, nothing deleted", again, err)
	}
	after := b.calls.Snapshot()
	for _, op := range []instrument.Op{instrument.OpPut, instrument.OpCommitBlocks, instrument.OpTransact, instrument.OpUpsertEntity} {
		if after[op].Calls != before[op].Calls {
			t.Errorf("the redelivery made %d %s calls, want none", after[op].Calls-before[op].Calls, op)
		}
	}
	if res, err := b.runResult(t, "op-none", `{"table":"Employees","toBlob":"archive/2026","pk":"Nobody","rkFrom":""}`); err != nil || res != "no entity left in the range" {
		t.Errorf("empty range = %q, %v", res, err)
	}
	if _, err := b.runResult(t, "op-nt", `{"table":"Nosuch","toBlob":"archive/2026","pk":"Sales","rkFrom":""}`); !jobs.IsPermanent(err) {
		t.Errorf("range of a missing table = %v, want permanent", err)
	}
}

// TestArchiveRangeToBlobCrashAtEveryCall fails a multi-part move of a
// range to blobs at each of its storage calls in turn, then redelivers
// it: the source ends empty and the parts hold every row exactly once
// (a part committed before the crash is adopted and its rows deleted by
// the redelivery, never written twice).
func TestArchiveRangeToBlobCrashAtEveryCall(t *testing.T) {
	args := `{"table":"Employees","toBlob":"archive/2026","pk":"P","rkFrom":""}`
	setup := func() *archiveBundle {
		b := newArchive(t)
		b.smallParts(t)
		b.seedRange(t, "P", 60)
		return b
	}
	ref := setup()
	before := ref.calls.Snapshot().Total().Calls
	if err := ref.run(t, "op-c", args); err != nil {
		t.Fatal(err)
	}
	total := int(ref.calls.Snapshot().Total().Calls - before)
	for k := 1; k <= total; k++ {
		b := setup()
		n := 0
		b.fault = func(op string) error {
			if n++; n == k {
				return fmt.Errorf("crash at call %d (%s): %w", k, op, storeadapter.ErrUnavailable)
			}
			return nil
		}
		if err := b.run(t, "op-c", args); err == nil {
			t.Fatalf("call %d failed and the move returned nil", k)
		}
		b.fault = nil
		if err := b.run(t, "op-c", args); err != nil {
			t.Fatalf("redelivery after a crash at call %d: %v", k, err)
		}
		if left := b.all(t, "Employees"); len(left) != 0 {
			t.Fatalf("crash at call %d: %d rows left in the source", k, len(left))
		}
		lines, err := rangeBlobLines(b)
		if err != nil {
			t.Fatal(err)
		}
		for i := range 60 {
			if got := len(lines[fmt.Sprintf("%05d", i)]); got != 1 {
				t.Fatalf("crash at call %d: row %05d is in %d lines, want 1", k, i, got)
			}
		}
		if len(lines) != 60 {
			t.Fatalf("crash at call %d: the parts hold %d rows, want 60", k, len(lines))
		}
	}
}

// TestArchiveRangeToBlobConcurrentChanges: right after the range is read
// (at the first block of the first part), the application updates row 4
// and deletes row 5. Row 4's delete (If-Match the exported ETag) fails,
// so it stays and a second pass exports its new version and deletes it;
// row 5's version is archived. Nothing is lost: the latest line of each
// row is its last version.
func TestArchiveRangeToBlobConcurrentChanges(t *testing.T) {
	b := newArchive(t)
	for _, rk := range []string{"1", "2", "3", "4", "5"} {
		b.insert(t, versioned("Sales", rk, 1))
	}
	changed := false
	b.fault = func(op string) error {
		if op != "StageBlock" || changed {
			return nil
		}
		changed = true
		ctx := context.Background()
		if _, err := b.store.Tables().UpdateEntity(ctx, "Employees", versioned("Sales", "4", 5), storeadapter.Replace, storeadapter.ETagAny); err != nil {
			return err
		}
		return b.store.Tables().DeleteEntity(ctx, "Employees", "Sales", "5", storeadapter.ETagAny)
	}
	if err := b.run(t, "op-1", `{"table":"Employees","toBlob":"archive/2026","pk":"Sales","rkFrom":""}`); err != nil {
		t.Fatal(err)
	}
	b.checkMoved(t, rangeBlobCopy, map[string]int64{"1": 1, "2": 1, "3": 1, "4": 5, "5": 1})
	lines, err := rangeBlobLines(b)
	if err != nil {
		t.Fatal(err)
	}
	if len(lines["4"]) != 2 || len(lines["3"]) != 1 {
		t.Errorf("row 4 in %d lines (want 2: both versions), row 3 in %d (want 1)", len(lines["4"]), len(lines["3"]))
	}
}

// TestArchiveRangeToBlobRowKeepsChanging rewrites one row before every
// delete transaction: after MaxConflicts passes the job fails (transient)
// naming the row, every other row moved; once the row settles, the
// redelivery (a new generation of the export) moves it.
func TestArchiveRangeToBlobRowKeepsChanging(t *testing.T) {
	b := newArchive(t)
	b.smallParts(t)
	b.seedRange(t, "P", 30)
	const hot = "00015"
	version := int64(1)
	rewriting := true
	b.fault = func(op string) error {
		if rewriting && op == "Transact" {
			version++
			b.store.Tables().UpdateEntity(context.Background(), "Employees", versioned("P", hot, version), storeadapter.Replace, storeadapter.ETagAny)
		}
		return nil
	}
	args := `{"table":"Employees","toBlob":"archive/2026","pk":"P","rkFrom":""}`
	err := b.run(t, "op-hot", args)
	if err == nil || jobs.IsPermanent(err) || !strings.Contains(err.Error(), `RowKey "`+hot+`"`) {
		t.Fatalf("range with a row that keeps changing = %v, want a transient error naming %s", err, hot)
	}
	if left := keys(b.all(t, "Employees")); !slices.Equal(left, []string{"P/" + hot}) {
		t.Fatalf("source holds %v after the delivery, want only %s", left, hot)
	}
	rewriting = false
	if err := b.run(t, "op-hot", args); err != nil {
		t.Fatalf("redelivery once the row settled = %v", err)
	}
	if left := b.all(t, "Employees"); len(left) != 0 {
		t.Fatalf("source holds %d rows, want 0", len(left))
	}
	got, err := rangeBlobCopy(b, hot)
	if err != nil || got.Properties["Version"] != version {
		t.Fatalf("latest line of %s: %v (%v), want Version %d", hot, got.Properties["Version"], err, version)
	}
}

// TestArchiveRangeToBlobMissingContainer: the container is created on
// first use, as for one entity.
func TestArchiveRangeToBlobMissingContainer(t *testing.T) {
	b := newArchive(t)
	b.insert(t, versioned("Sales", "1", 1))
	if err := b.run(t, "op-1", `{"table":"Employees","toBlob":"fresh","pk":"Sales","rkFrom":""}`); err != nil {
		t.Fatal(err)
	}
	if _, err := b.store.Container("fresh").List(context.Background(), "", ""); err != nil {
		t.Fatalf("container not created: %v", err)
	}
	if _, err := b.store.Tables().GetEntity(context.Background(), "Employees", "Sales", "1"); !errors.Is(err, storeadapter.ErrNotFound) {
		t.Fatalf("source row still there: %v", err)
	}
}
