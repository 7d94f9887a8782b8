package indexes

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"strings"
	"sync"
	"time"

	"github.com/tablekeeper/tablekeeper/internal/clock"

	"github.com/tablekeeper/tablekeeper/idempotent"
	"github.com/tablekeeper/tablekeeper/storeadapter"
)

// RebuildResult counts what a rebuild did.
type RebuildResult struct {
	// Entities is how many entities were reconciled.
	Entities int `json:"entities"`
	// Swept is how many entities were removed from entries they no
	// longer belong in: deleted entities still indexed, and entries the
	// sweep found stale.
	Swept int `json:"swept"`
	// Pruned is how many expired tombstone rows were deleted, Dropped how
	// many membership records of long-gone entities.
	Pruned  int `json:"pruned"`
	Dropped int `json:"dropped"`
	// Folded is how many table list markers were folded into their
	// lists' lines (see markers).
	Folded int `json:"folded,omitempty"`
	// Conflicts and Unindexable count entities that are not in an index
	// for those reasons (see Outcome).
	Conflicts   int `json:"conflicts"`
	Unindexable int `json:"unindexable"`
}

// String summarises a rebuild for the job's result.
func (r RebuildResult) String() string {
	s := fmt.Sprintf("rebuilt: %d entities reconciled, %d stale entries swept, %d tombstones pruned, %d records dropped, %d conflicts, %d unindexable",
		r.Entities, r.Swept, r.Pruned, r.Dropped, r.Conflicts, r.Unindexable)
	if r.Folded > 0 {
		s += fmt.Sprintf(", %d list markers folded", r.Folded)
	}
	return s
}

// RebuildOptions tune a rebuild.
type RebuildOptions struct {
	// Stop, when set, is asked after each chunk: true makes Rebuild save
	// its position and return a *Stopped error, to continue later (the
	// index kind passes its time budget).
	Stop func() bool
	// Parallel bounds the chunks reconciled at once; chunks of one
	// partition never run at once. Default 4.
	Parallel int
}

// Stopped is the error of a rebuild that saved its position and stopped
// because RebuildOptions.Stop said so: running it again with the same
// operation id goes on from there.
type Stopped struct {
	// Result counts what the rebuild did so far, all deliveries together.
	Result RebuildResult
}

func (s *Stopped) Error() string {
	return "index: rebuild stopped to continue later: " + s.Result.String()
}

// The checkpoint steps of a rebuild and of a prune.
const (
	rebuildStep = "index-rebuild"
	pruneStep   = "index-prune"
)

// stepOf is the checkpoint step of a run whose first phase is first.
func stepOf(first string) string {
	if first == phasePrune {
		return pruneStep
	}
	return rebuildStep
}

// Phases of a rebuild.
const (
	phaseScan  = "scan"  // chunks of the table, registering every key
	phaseSweep = "sweep" // each index's entries not rewritten by the scan
	phasePrune = "prune" // a prune's (see Prune): each table list folded; each rows index's and table list's expired dead rows
	phaseDone  = "done"
)

// rebuildState is a rebuild's checkpoint, JSON in its token.
type rebuildState struct {
	V     int    `json:"v"`
	Phase string `json:"phase"`
	// After is the key through which the scan is done (nil: none yet).
	After *Key `json:"after,omitempty"`
	// Index is the index the sweep is at, Token the continuation of its
	// scan.
	Index string `json:"index,omitempty"`
	Token string `json:"token,omitempty"`
	// Fold is, while a prune folds the table list Index, the list
	// partition of the last value it folded ("": none yet), and FoldDone
	// is set once it has folded them all (see prune).
	Fold     string `json:"fold,omitempty"`
	FoldDone bool   `json:"foldDone,omitempty"`
	// Gen is the generation (the worker's clock in microseconds) and
	// Began the service's time (the checkpoint's Timestamp) when the
	// rebuild began: entries the scan rewrote are newer than both.
	Gen   int64         `json:"gen"`
	Began time.Time     `json:"began"`
	Res   RebuildResult `json:"res"`
}

const rebuildStateVersion = 2

// Rebuild makes every index of a source table (or of partition pk) equal
// to the table, whatever the membership records and the entries say, in
// two checkpointed phases saved in cp under opID, so that a rebuild
// that stops (a crash, a lost lease, RebuildOptions.Stop) goes on from its
// last save when run again with the same opID:
//
//  1. Scan: the table in chunks (see Sync: records, then entities, a
//     thousand of each at a time), every key registered afresh (force):
//     each entity's entries are written again at a new generation, and
//     the keys of entities gone are removed. Chunks of different
//     partitions run at once (RebuildOptions.Parallel); the position
//     saved is the end of the chunks done in key order, saved as that
//     advances, at most once a second.
//  2. Sweep: each index's entries, page by page. An entry the scan wrote
//     again is newer than the rebuild (its row's Timestamp; for a list
//     line or a table copy's owner, its generation); any other is checked
//     against its key's membership record, read many at a time, and
//     where the record says otherwise the key is reconciled with that
//     value to remove, which removes the entry if its entity does not
//     hold the value (at a generation above the entry's: a worker whose
//     clock ran ahead may have written it above this one's). Partition
//     list lines carry neither, so every one is checked.
//  3. Prune, of a rebuild of the whole table, as Prune does it: the table
//     lists' markers folded into their lines, then the rows indexes'
//     expired dead rows and the table lists' dead markers deleted (a
//     rebuild of a partition leaves them to a prune: the queries read the
//     whole index table).
//
// Clock skew. Generations are the workers' clocks (in µs, or the record's
// last plus one). A list line or table copy written by a worker whose
// clock runs ahead of this one's carries a generation newer than the
// rebuild: the sweep checks it while it is still ahead of this clock. One
// it reaches after that, from a rebuild started within the skew of the
// write, passes for the scan's own, and is left if its record was lost or
// never held it; run the rebuild again once the skew has passed.
//
// The scan's writes are Reconcile's, batched (see Sync), so a rebuild
// racing the application's writes and their reconciles never leaves an
// entry older than its entity: every registration is If-Match of a
// record read before the entity. Memory holds the chunks in flight.
func (x *Set) Rebuild(ctx context.Context, table string, pk *string, cp idempotent.Checkpoints, opID string, o RebuildOptions) (RebuildResult, error) {
	return x.runRebuild(ctx, table, pk, cp, opID, o, phaseScan)
}

// runRebuild runs a rebuild, or a prune (see Prune), from its checkpoint
// or from its first phase.
func (x *Set) runRebuild(ctx context.Context, table string, pk *string, cp idempotent.Checkpoints, opID string, o RebuildOptions, first string) (RebuildResult, error) {
	ti, err := x.indexes(table)
	if err != nil {
		return RebuildResult{}, err
	}
	st, err := x.loadRebuild(ctx, cp, opID, first)
	if err != nil {
		return st.Res, err
	}
	r := &rebuild{x: x, ti: ti, pk: pk, cp: cp, opID: opID, step: stepOf(first), st: st, o: o}
	if r.o.Parallel < 1 {
		r.o.Parallel = 4
	}
	for {
		switch r.st.Phase {
		case phaseScan:
			err = r.scan(ctx)
		case phaseSweep:
			err = r.sweep(ctx)
		case phasePrune:
			err = r.prune(ctx)
		case phaseDone:
			return r.st.Res, cp.Clear(ctx, opID, r.step)
		}
		if err != nil {
			return r.st.Res, err
		}
	}
}

// loadRebuild loads a rebuild's state, or begins one: its generation by
// this worker's clock and its time by the service's (the checkpoint's
// Timestamp). A checkpoint of another layout (an older rebuild) starts
// over: every step is idempotent.
func (x *Set) loadRebuild(ctx context.Context, cp idempotent.Checkpoints, opID, first string) (rebuildState, error) {
	step := stepOf(first)
	tok, err := cp.Load(ctx, opID, step)
	if err != nil {
		return rebuildState{}, err
	}
	var st rebuildState
	if tok != "" && json.Unmarshal([]byte(tok), &st) == nil && st.V == rebuildStateVersion && !st.Began.IsZero() {
		return st, nil
	}
	st = rebuildState{V: rebuildStateVersion, Phase: first, Gen: x.clock.Now().UnixMicro()}
	if err := saveState(ctx, cp, opID, step, st); err != nil {
		return st, err
	}
	e, err := cp.Tables.GetEntity(ctx, cp.Table, opID, step)
	if err != nil {
		return st, fmt.Errorf("index: read the rebuild's checkpoint %s/%s: %w", opID, step, err)
	}
	st.Began = e.Timestamp
	return st, saveState(ctx, cp, opID, step, st)
}

func saveState(ctx context.Context, cp idempotent.Checkpoints, opID, step string, st rebuildState) error {
	b, _ := json.Marshal(st) // keys, strings and numbers: never fails
	return cp.Save(ctx, opID, step, string(b))
}

// rebuild is one run of a rebuild.
type rebuild struct {
	x    *Set
	ti   *tableIndexes
	pk   *string
	cp   idempotent.Checkpoints
	opID string
	step string // its checkpoint's (see stepOf)
	st   rebuildState
	o    RebuildOptions
	mu   sync.Mutex // guards st.Res while chunks run
}

func (r *rebuild) save(ctx context.Context) error {
	r.mu.Lock()
	st := r.st
	r.mu.Unlock()
	return saveState(ctx, r.cp, r.opID, r.step, st)
}

// stop reports whether the caller asked to stop.
func (r *rebuild) stop() bool { return r.o.Stop != nil && r.o.Stop() }

func (r *rebuild) stopped(ctx context.Context) error {
	if err := r.save(ctx); err != nil {
		return err
	}
	r.mu.Lock()
	defer r.mu.Unlock()
	return &Stopped{Result: r.st.Res}
}

// chunkRun is one chunk of the scan in flight.
type chunkRun struct {
	end  *Key // nil: the scan's end
	last string
	done chan struct{}
	err  error
}

// scan is phase 1: chunks read one after another, reconciled up to
// Parallel at once (never two of one partition), the position saved as
// the chunks done in key order advance.
func (r *rebuild) scan(parent context.Context) error {
	ctx, cancel := context.WithCancel(parent)
	defer cancel()
	var inflight []*chunkRun // in key order, not yet past the position
	sem := make(chan struct{}, r.o.Parallel)
	lastSave := time.Now()
	// fold moves the position past the finished chunks at the head of
	// inflight (waiting for all of them with all) and saves it when it
	// moved, at most once a second unless the scan ends or all is set.
	fold := func(all bool) error {
		moved := false
	head:
		for len(inflight) > 0 {
			c := inflight[0]
			if all {
				<-c.done
			} else {
				select {
				case <-c.done:
				default:
					break head
				}
			}
			if c.err != nil {
				return c.err
			}
			inflight, moved = inflight[1:], true
			if c.end == nil {
				r.st.Phase, r.st.After, r.st.Token = phaseSweep, nil, ""
				if len(r.ti.indexes) > 0 {
					r.st.Index = r.ti.indexes[0].Name
				}
			} else {
				r.st.After = c.end
			}
		}
		if moved && (all || r.st.Phase != phaseScan || time.Since(lastSave) >= time.Second) {
			lastSave = time.Now()
			return r.save(parent)
		}
		return nil
	}
	// fail stops the chunks in flight and saves the position past those
	// that finished before the first failure. The save is an upsert: a
	// delivery that lost its lease may move the position back (or save a
	// cleared rebuild again), which costs work done again, never work
	// skipped.
	fail := func(err error) error {
		cancel()
		for _, c := range inflight {
			<-c.done
		}
		for len(inflight) > 0 && inflight[0].err == nil {
			if inflight[0].end != nil {
				r.st.After = inflight[0].end
			}
			inflight = inflight[1:]
		}
		if serr := r.save(context.WithoutCancel(parent)); serr != nil {
			return errors.Join(err, serr)
		}
		return err
	}
	sp := Span{PK: r.pk, After: r.st.After}
	for {
		if r.stop() {
			if err := fold(true); err != nil {
				return fail(err)
			}
			return r.stopped(parent)
		}
		items, end, err := r.x.readChunk(ctx, r.ti, sp)
		if err != nil {
			return fail(err)
		}
		c := &chunkRun{end: end, done: make(chan struct{})}
		if len(items) > 0 {
			c.last = items[len(items)-1].PK
			// Chunks of one partition never run at once: only a chunk in
			// flight ending in this chunk's first partition can share it.
			for _, f := range inflight {
				if f.last == items[0].PK {
					<-f.done
				}
			}
		}
		sem <- struct{}{}
		inflight = append(inflight, c)
		go func() {
			defer func() { <-sem; close(c.done) }()
			res, err := r.x.syncChunk(ctx, r.ti, items, true)
			r.mu.Lock()
			r.st.Res.Entities += res.Entities
			r.st.Res.Swept += res.Removed
			r.st.Res.Dropped += res.Dropped
			r.st.Res.Conflicts += res.Conflicts
			r.st.Res.Unindexable += res.Unindexable
			r.mu.Unlock()
			c.err = err
		}()
		if end == nil {
			if err := fold(true); err != nil {
				return fail(err)
			}
			return nil
		}
		if err := fold(false); err != nil {
			return fail(err)
		}
		sp.After, sp.From = end, nil
	}
}

// sweep is phase 2, one index after another.
func (r *rebuild) sweep(ctx context.Context) error {
	for i, ix := range r.ti.indexes {
		if !strings.EqualFold(ix.Name, r.st.Index) {
			continue
		}
		var cands []Entry
		consider := func(en Entry) error {
			if r.pk != nil && en.PK != *r.pk {
				return nil
			}
			if en.Dead { // a rows index's: the prune phase deletes the expired ones
				return nil
			}
			if r.candidate(ix, en) {
				cands = append(cands, en)
			}
			return nil
		}
		// A table list's markers are checked as a rows index's rows are,
		// each (a live one its record does not name, folded or not, is
		// killed); its lines as its members, a page at a time: a line that
		// a dead marker not folded on the page hides is no candidate. (One
		// hidden by a marker of the page before is checked: its key is
		// reconciled, which kills it again, or left, see holds.)
		visit, flush := consider, func() error { return nil }
		if ix.Kind == KindList && !ix.partition() {
			ms := &memberScan{visit: func(en Entry) error {
				if en.row == 0 {
					return consider(en)
				}
				return nil
			}}
			visit = func(en Entry) error {
				if en.row > 0 {
					if err := consider(en); err != nil {
						return err
					}
				}
				return ms.add(en)
			}
			flush = ms.flush
		}
		err := r.x.scanEntries(ctx, ix, r.pk, r.st.Token, visit, func(next string) error {
			if err := flush(); err != nil {
				return err
			}
			if err := r.verify(ctx, ix, cands); err != nil {
				return err
			}
			cands = cands[:0]
			r.st.Token = next
			if next == "" {
				r.st.Index, r.st.Phase = "", r.afterSweep()
				if i+1 < len(r.ti.indexes) {
					r.st.Index, r.st.Phase = r.ti.indexes[i+1].Name, phaseSweep
				}
			}
			if err := r.save(ctx); err != nil || next == "" {
				return err
			}
			if r.stop() {
				return r.stopped(ctx)
			}
			return nil
		})
		return err
	}
	r.st.Phase, r.st.Index, r.st.Token = r.afterSweep(), "", "" // an index no longer declared
	return nil
}

// afterSweep is the phase after the sweep: a rebuild of the whole table
// prunes, folding its table lists and deleting the expired dead rows and
// markers (see Prune); one of a partition leaves that to a prune, which
// reads the whole index table.
func (r *rebuild) afterSweep() string {
	if r.pk == nil {
		return phasePrune
	}
	return phaseDone
}

// candidate reports whether the sweep must check an entry: one the scan
// did not write again.
func (r *rebuild) candidate(ix *index, en Entry) bool {
	switch {
	case ix.Kind == KindList && ix.partition():
		return true // its lines carry no generation
	case ix.Kind == KindList, ix.Kind == KindCopy && !ix.partition():
		// A line's generation; a table copy's owner's (tkGen): its row's
		// Timestamp moves with other keys' tombstones. A generation above
		// this worker's clock is checked too: a worker whose clock ran
		// ahead wrote it, or a registration above such a one (see
		// Rebuild for the window this leaves).
		return en.Gen < r.st.Gen || en.Gen > r.x.clock.Now().UnixMicro()
	}
	return en.written.Before(r.st.Began)
}

// verify checks candidates against their keys' membership records, read
// up to 14 a query per partition, and reconciles the keys whose record
// does not hold the entry's value, with that value to remove.
func (r *rebuild) verify(ctx context.Context, ix *index, cands []Entry) error {
	byPK := map[string][]Entry{}
	for _, en := range cands {
		byPK[en.PK] = append(byPK[en.PK], en)
	}
	for pk, ens := range byPK {
		var rks []string
		for _, en := range ens {
			rks = append(rks, memberRowKey(en.RK))
		}
		recs, err := r.x.readRows(ctx, r.ti.source, pk, rks)
		if err != nil {
			return err
		}
		for _, en := range ens {
			m := readMembership(recs[memberRowKey(en.RK)], r.ti)
			if err := m.known(); err != nil {
				return fmt.Errorf("index: %s %s/%s: %w", r.ti.source, en.PK, en.RK, err)
			}
			if stateValue(m.applied[ix.Name]) == en.Encoded && holds(ix, m.rows[ix.Name], en) {
				continue
			}
			var out Outcome
			err := retryTransient(ctx, func() (err error) {
				out, err = r.x.reconcile(ctx, r.ti, en.PK, en.RK, false, &stray{index: ix.Name, value: en.Encoded, gen: en.Gen, row: en.row})
				return err
			})
			if errors.Is(err, storeadapter.ErrInvalidInput) || errors.Is(err, storeadapter.ErrTooLarge) {
				r.st.Res.Unindexable++
				continue
			}
			if err != nil {
				return err
			}
			if out.Changed {
				r.st.Res.Swept++
			}
		}
	}
	return nil
}

// retryTransient runs fn up to three times while it fails with a
// transient error, pausing 100 ms and then 400 ms: one failed call of a
// rebuild's thousands does not send it back to its last checkpoint.
func retryTransient(ctx context.Context, fn func() error) error {
	err := fn()
	for pause := 100 * time.Millisecond; err != nil && storeadapter.IsTransient(err) && pause <= 400*time.Millisecond; pause *= 4 {
		if serr := clock.Sleep(ctx, nil, pause); serr != nil {
			return err
		}
		err = fn()
	}
	return err
}

// holds reports whether the entry en of the value a key's record applies
// to index ix is one the record accounts for (st: the index's rows
// state): any entry of a list or copy; of a rows index, only the live
// row; of a table list, its live marker, or a line no newer than it (the
// line it folded into, or one its registration's kill hides: see
// markers), or any line while the line is the live entry (live 0).
func holds(ix *index, st rowsState, en Entry) bool {
	switch {
	case !ix.rowsKeyed():
		return true
	case ix.Kind == KindList && en.row == 0:
		return st.live == 0 || st.live >= en.Gen
	}
	return st.live == en.row
}
