package purge

import (
	"context"
	"sync"

	"github.com/tablekeeper/tablekeeper/idempotent"
	"github.com/tablekeeper/tablekeeper/storeadapter"
)

// Overlap. A page's round trips are not taken one after another: the
// next page is read while this one's rows are deleted (prefetch), and the
// page's transactions run Config.Transactions at a time (deletePage). The
// calls are the same as one at a time, and so is the crash argument: the
// checkpoint is saved only after every transaction of the page has ended
// and the indexes are synced, and a prefetched page is only a read. A
// prefetch whose page is not used — the time budget was spent, another
// delivery's save moved the position, the page failed — is cancelled and
// waited for: at most one query more per delivery.

// prefetch is a page being read ahead, from token.
type prefetch struct {
	token  string
	cancel context.CancelFunc
	done   chan struct{}
	page   storeadapter.Page
	err    error
}

// readAhead starts reading the page at token; nil when token is "" (no
// next page).
func (p *purger) readAhead(ctx context.Context, token string) *prefetch {
	if token == "" {
		return nil
	}
	filter := p.filter() // here: the goroutine must not read p.st
	ctx, cancel := context.WithCancel(ctx)
	f := &prefetch{token: token, cancel: cancel, done: make(chan struct{})}
	go func() {
		defer close(f.done)
		f.page, f.err = p.query(ctx, filter, token)
	}()
	return f
}

// take returns the prefetched page when it is the page at token (the
// checkpoint's position), else discards it and reports false.
func (f *prefetch) take(token string) (storeadapter.Page, bool, error) {
	if f == nil || f.token != token {
		f.discard()
		return storeadapter.Page{}, false, nil
	}
	<-f.done
	f.cancel()
	return f.page, true, f.err
}

// discard cancels the read and waits for it to end.
func (f *prefetch) discard() {
	if f != nil {
		f.cancel()
		<-f.done
	}
}

// deletePage deletes a page's rows (step 3 of Worker): its batches run
// Config.Transactions at a time, each independent of the others (one
// partition, disjoint rows). It returns the rows deleted and the
// transactions that deleted any once every batch has ended; the first
// error, if any, after that.
func (p *purger) deletePage(ctx context.Context, page storeadapter.Page) (deleted, batches int64, err error) {
	all := idempotent.Batches(deletes(page.Entities))
	if len(all) == 1 || p.w.cfg.Transactions == 1 {
		for _, b := range all {
			n, err := p.deleteBatch(ctx, b)
			if err != nil {
				return deleted, batches, err
			}
			deleted, batches = deleted+int64(n), batches+int64(min(n, 1))
		}
		return deleted, batches, nil
	}
	ctx, cancel := context.WithCancel(ctx)
	defer cancel()
	var (
		mu  sync.Mutex
		wg  sync.WaitGroup
		sem = make(chan struct{}, p.w.cfg.Transactions)
	)
	for _, b := range all {
		select {
		case sem <- struct{}{}:
		case <-ctx.Done():
		}
		if ctx.Err() != nil {
			break
		}
		wg.Add(1)
		go func() {
			defer func() { <-sem; wg.Done() }()
			n, berr := p.deleteBatch(ctx, b)
			mu.Lock()
			defer mu.Unlock()
			deleted, batches = deleted+int64(n), batches+int64(min(n, 1))
			if berr != nil && err == nil {
				err = berr
				cancel() // the others stop; the page is read again
			}
		}()
	}
	wg.Wait()
	if err == nil && ctx.Err() != nil {
		err = context.Cause(ctx) // the caller's context ended
	}
	return deleted, batches, err
}
