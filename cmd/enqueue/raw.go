package main

import (
	"bufio"
	"bytes"
	"cmp"
	"context"
	"errors"
	"fmt"
	"io"
	"maps"
	"os"
	"slices"
	"strings"
	"sync"
	"sync/atomic"
	"time"

	"github.com/tablekeeper/tablekeeper/jobs"
	"github.com/tablekeeper/tablekeeper/jobs/catalog"
	"github.com/tablekeeper/tablekeeper/storeadapter"
)

// Raw's tuning.
const (
	// defaultRawConcurrency is -concurrency's default.
	defaultRawConcurrency = 16
	// maxRawConcurrency bounds -concurrency.
	maxRawConcurrency = 1024
	// maxLineBytes bounds one input line. A valid envelope is far smaller
	// (its base64 must fit a 64 KiB message); longer lines are reported and
	// skipped without being held in memory.
	maxLineBytes = 1 << 20
	// progressEvery is how often the progress line is redrawn at most.
	progressEvery = 100 * time.Millisecond
	// maxShownErrors is how many failed lines are printed on stderr; the
	// rest are counted (and all listed by -o json).
	maxShownErrors = 20
)

// runRaw streams envelopes, one JSON (or base64 of JSON) per line, checks
// each against the job kinds the worker knows, and sends the valid ones
// with -concurrency senders. Invalid lines are reported on stderr by line
// number and skipped. A send error other than a rejected message (an
// unreachable or forbidden queue) stops the run, since every later line
// would fail the same way.
func (m *Main) runRaw(ctx context.Context, args []string) error {
	var (
		c           common
		file        string
		concurrency int
	)
	fs := m.newFlagSet("raw", "raw [-file F] [-concurrency N] [flags]",
		"Enqueues envelopes read as JSON lines from stdin or -file; blank lines are skipped. Each line is\n"+
			"an envelope {\"v\":1,\"id\":...,\"kind\":...,\"args\":{...}} in JSON or base64 of JSON, validated like the\n"+
			"worker does and sent as base64. Invalid lines are reported as \"line N: <error>\" and skipped;\n"+
			"the exit status is 1 if any line failed.", &c)
	fs.StringVar(&file, "file", "", "read envelopes from this file instead of stdin")
	fs.IntVar(&concurrency, "concurrency", defaultRawConcurrency, "messages sent at once (1-1024)")
	if err := m.parseNoArgs(fs, &c, args); err != nil {
		return err
	}
	if concurrency < 1 || concurrency > maxRawConcurrency {
		return usagef("-concurrency: must be 1-%d, got %d", maxRawConcurrency, concurrency)
	}
	progress := m.isTerminal(m.Stderr)

	in, total := m.Stdin, int64(-1)
	if file != "" {
		f, err := os.Open(file)
		if err != nil {
			return fmt.Errorf("-file: %w", err)
		}
		defer f.Close()
		if st, err := f.Stat(); err == nil && st.Mode().IsRegular() && progress {
			if total, err = countLines(f); err != nil {
				return fmt.Errorf("-file: %w", err)
			}
			if _, err := f.Seek(0, io.SeekStart); err != nil {
				return fmt.Errorf("-file: %w", err)
			}
		}
		in = f
	}
	if in == nil {
		in = bytes.NewReader(nil)
	}

	store, err := m.connect(&c)
	if err != nil {
		return err
	}
	r := &rawRun{
		m:        m,
		queue:    store.Queue(c.queue),
		registry: catalog.ArgsRegistry(store.Container),
		progress: progress,
		total:    total,
		start:    time.Now(),
		file:     file,
		pending:  map[int]bool{},
	}
	return r.run(ctx, in, concurrency, c.json())
}

// rawLine is one valid line, encoded and ready to send.
type rawLine struct {
	n    int
	text string
}

// rawRun is one run of the raw command.
type rawRun struct {
	m        *Main
	queue    storeadapter.Queue
	registry *jobs.Registry
	progress bool
	total    int64 // non-blank lines of -file, or -1 when unknown
	start    time.Time

	file string // -file, for the resume hint

	read, sent, failed atomic.Int64
	mu                 sync.Mutex // serialises writes to stderr and guards the fields below
	failures           []rawFailure
	pending            map[int]bool // lines handed to the senders and not yet sent or refused
	lastRead           int          // the last line read
	eof                bool         // the whole input was read
}

// rawFailure is one failed line, as -o json lists it.
type rawFailure struct {
	Line  int    `json:"line"`
	Error string `json:"error"`
}

// run reads in, sends the valid lines with n senders and reports.
func (r *rawRun) run(ctx context.Context, in io.Reader, n int, asJSON bool) error {
	ctx, cancel := context.WithCancelCause(ctx)
	defer cancel(nil)

	stopProgress := r.startProgress()
	work := make(chan rawLine, n)
	var wg sync.WaitGroup
	for range n {
		wg.Go(func() {
			for l := range work {
				r.send(ctx, cancel, l)
			}
		})
	}
	readErr := r.readLines(ctx, in, work)
	close(work)
	wg.Wait()
	stopProgress()

	sent, failed := r.sent.Load(), r.failed.Load()
	notSent := r.read.Load() - sent - failed
	resume := r.resumeLine()
	if asJSON {
		if err := writeJSON(r.m.Stdout, struct {
			Sent     int64        `json:"sent"`
			Failed   int64        `json:"failed"`
			NotSent  int64        `json:"notSent"`
			Failures []rawFailure `json:"failures"`
			// ResumeFromLine is the first line not sent, 0 when none.
			ResumeFromLine int `json:"resumeFromLine,omitempty"`
		}{sent, failed, notSent, append([]rawFailure{}, r.failures...), resume}); err != nil {
			return err
		}
	} else {
		msg := fmt.Sprintf("sent %d, failed %d", sent, failed)
		if notSent > 0 {
			msg += fmt.Sprintf(", not sent %d", notSent)
		}
		fmt.Fprintln(r.m.Stdout, msg)
	}
	if hidden := len(r.failures) - maxShownErrors; hidden > 0 {
		fmt.Fprintf(r.m.Stderr, "%d more failed lines not shown (-o json lists them all)\n", hidden)
	}
	if resume > 0 {
		r.reportNotSent(resume)
	}
	switch {
	case readErr != nil:
		return fmt.Errorf("read input: %w", readErr)
	case context.Cause(ctx) != nil:
		return fmt.Errorf("stopped: %w", context.Cause(ctx))
	case failed > 0:
		return fmt.Errorf("%d of %d lines failed", failed, r.read.Load())
	}
	return nil
}

// resumeLine returns the first line that was neither sent nor refused (0
// when every line was): a line whose send was cut short, or the first line
// not read.
func (r *rawRun) resumeLine() int {
	first := 0
	for n := range r.pending {
		if first == 0 || n < first {
			first = n
		}
	}
	if first == 0 && !r.eof {
		first = r.lastRead + 1
	}
	return first
}

// reportNotSent says on stderr which lines were not sent and how to send
// them: from line resume on, again.
func (r *rawRun) reportNotSent(resume int) {
	lines := slices.Sorted(maps.Keys(r.pending))
	var what string
	switch {
	case len(lines) == 1:
		what = fmt.Sprintf("line %d", lines[0])
	case len(lines) > 1:
		what = fmt.Sprintf("%d lines from line %d", len(lines), lines[0])
	}
	if !r.eof {
		what = strings.TrimPrefix(what+fmt.Sprintf(" and every line after %d (not read)", r.lastRead), " and ")
	}
	src := cmp.Or(r.file, "<input>")
	fmt.Fprintf(r.m.Stderr, "not sent: %s; resume with: tail -n +%d %s | enqueue raw (lines after %d that were sent are sent again, which the worker absorbs: it is idempotent by op id)\n",
		what, resume, src, resume)
}

// readLines reads in line by line, validates and encodes each non-blank
// line and hands the valid ones to work. It stops early when ctx ends.
func (r *rawRun) readLines(ctx context.Context, in io.Reader, work chan<- rawLine) error {
	br := bufio.NewReaderSize(in, 64<<10)
	for n := 1; ; n++ {
		line, tooLong, err := readLine(br)
		if err != nil && err != io.EOF {
			return err
		}
		if len(line) == 0 && !tooLong && err == io.EOF {
			r.markRead(n-1, true)
			return nil
		}
		line = bytes.TrimSpace(line)
		switch {
		case tooLong:
			r.read.Add(1)
			r.failed.Add(1)
			r.fail(n, fmt.Errorf("longer than %d bytes", maxLineBytes))
		case len(line) > 0:
			r.read.Add(1)
			text, verr := r.validate(ctx, string(line))
			if verr != nil {
				r.failed.Add(1)
				r.fail(n, verr)
				break
			}
			r.mu.Lock()
			r.pending[n] = true
			r.mu.Unlock()
			select {
			case work <- rawLine{n: n, text: text}:
			case <-ctx.Done():
				r.markRead(n, false)
				return nil // the line counts as not sent
			}
		}
		if err == io.EOF || ctx.Err() != nil {
			r.markRead(n, err == io.EOF)
			return nil
		}
	}
}

// markRead records the last line read and whether the input ended there.
func (r *rawRun) markRead(n int, eof bool) {
	r.mu.Lock()
	defer r.mu.Unlock()
	r.lastRead, r.eof = n, eof
}

// validate decodes one line as the worker would and returns it re-encoded
// as base64 message text.
func (r *rawRun) validate(ctx context.Context, line string) (string, error) {
	task, err := r.registry.Decode(ctx, storeadapter.Message{Text: line})
	if err != nil {
		return "", err
	}
	return jobs.Encode(task.Envelope)
}

// send sends one line; a failure that is not the message's own fault
// cancels the run.
func (r *rawRun) send(ctx context.Context, cancel context.CancelCauseFunc, l rawLine) {
	if ctx.Err() != nil {
		return // stopping: the line counts as not sent
	}
	_, err := sendCreating(ctx, r.queue, l.text)
	refused := errors.Is(err, storeadapter.ErrInvalidInput) || errors.Is(err, storeadapter.ErrTooLarge)
	switch {
	case err == nil:
		r.sent.Add(1)
	case ctx.Err() != nil:
		return // stopping anyway: the line counts as not sent
	case refused:
		r.failed.Add(1)
		r.fail(l.n, err)
	default:
		// Not the line's fault: it counts as not sent, and the run stops
		// with this error, since every later line would fail the same way.
		cancel(fmt.Errorf("line %d: %w", l.n, err))
		return
	}
	r.mu.Lock()
	delete(r.pending, l.n)
	r.mu.Unlock()
}

// fail records a failed line and reports it on stderr, the first
// maxShownErrors of them; callers count it.
func (r *rawRun) fail(n int, err error) {
	r.mu.Lock()
	defer r.mu.Unlock()
	text := r.m.redact(err.Error())
	r.failures = append(r.failures, rawFailure{Line: n, Error: text})
	if len(r.failures) > maxShownErrors {
		return
	}
	prefix := ""
	if r.progress {
		prefix = "\r\x1b[K" // clear the progress line first
	}
	fmt.Fprintf(r.m.Stderr, "%sline %d: %s\n", prefix, n, text)
}

// startProgress draws the progress line every progressEvery while the run
// goes on, when stderr is a terminal; the function it returns stops it and
// ends the line.
func (r *rawRun) startProgress() (stop func()) {
	if !r.progress {
		return func() {}
	}
	done := make(chan struct{})
	var wg sync.WaitGroup
	wg.Go(func() {
		t := time.NewTicker(progressEvery)
		defer t.Stop()
		last := int64(-1)
		for {
			select {
			case <-t.C:
				if s := r.sent.Load(); s != last {
					last = s
					r.drawProgress()
				}
			case <-done:
				return
			}
		}
	})
	return func() {
		close(done)
		wg.Wait()
		r.drawProgress()
		r.mu.Lock()
		fmt.Fprintln(r.m.Stderr)
		r.mu.Unlock()
	}
}

// drawProgress rewrites the progress line: "sent 1234/5000 (820/s)", or
// without the total when it is unknown.
func (r *rawRun) drawProgress() {
	r.mu.Lock()
	defer r.mu.Unlock()
	sent := r.sent.Load()
	rate := 0.0
	if d := time.Since(r.start).Seconds(); d > 0 {
		rate = float64(sent) / d
	}
	if r.total >= 0 {
		fmt.Fprintf(r.m.Stderr, "\rsent %d/%d (%.0f/s)\x1b[K", sent, r.total, rate)
	} else {
		fmt.Fprintf(r.m.Stderr, "\rsent %d (%.0f/s)\x1b[K", sent, rate)
	}
}

// readLine reads one line, newline included, keeping at most maxLineBytes
// of it: a longer line is consumed and dropped, and tooLong reports it. err is
// io.EOF with the last line when the input does not end with a newline.
func readLine(br *bufio.Reader) (line []byte, tooLong bool, err error) {
	for {
		chunk, err := br.ReadSlice('\n')
		if !tooLong {
			if len(line)+len(chunk) > maxLineBytes {
				tooLong, line = true, nil
			} else {
				line = append(line, chunk...)
			}
		}
		if err != bufio.ErrBufferFull {
			return line, tooLong, err
		}
	}
}

// countLines counts the non-blank lines of r (to show a total).
func countLines(r io.Reader) (int64, error) {
	br := bufio.NewReaderSize(r, 64<<10)
	var n int64
	for {
		line, tooLong, err := readLine(br)
		if err != nil && err != io.EOF {
			return n, err
		}
		if tooLong || len(bytes.TrimSpace(line)) > 0 {
			n++
		}
		if err == io.EOF {
			return n, nil
		}
	}
}
