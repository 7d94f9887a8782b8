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

	"github.com/tablekeeper/tablekeeper/client"
	"github.com/tablekeeper/tablekeeper/jobs"
)

// Raw's tuning.
const (
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
// each as the worker would (jobs.DecodeEnvelope, then the client's
// PrepareEnvelope: the kind's parser and Validate), and sends the valid
// ones, each exactly as given, through the client's Stream with
// -concurrency senders. Invalid lines are reported on stderr by line
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
	fs.IntVar(&concurrency, "concurrency", client.DefaultConcurrency, "messages sent at once (1-1024)")
	if err := m.parseNoArgs(fs, &c, args); err != nil {
		return err
	}
	if err := checkConcurrency(concurrency); err != nil {
		return err
	}
	in, err := m.openLines(file)
	if err != nil {
		return err
	}
	defer in.Close()
	cl, _, err := m.connectClient(&c, concurrency)
	if err != nil {
		return err
	}
	return m.sendLines(ctx, in, bulkSend{
		client:  cl,
		asJSON:  c.json(),
		command: "enqueue raw",
		again:   "it is idempotent by op id",
		convert: func(ctx context.Context, line string) (client.Message, error) {
			// Decoded as the worker would, and sent re-encoded as base64.
			env, err := jobs.DecodeEnvelope(line)
			if err != nil {
				return client.Message{}, err
			}
			msg, err := cl.PrepareEnvelope(ctx, env)
			if err != nil {
				return msg, jobError(err, env.ID)
			}
			return msg, nil
		},
	})
}

// bulkSend describes one bulk send: lines of a lineInput, each turned
// into a prepared job by convert and sent through the client's Stream
// (its Config.Concurrency senders). raw and index reconcile use it.
type bulkSend struct {
	client *client.Client
	asJSON bool
	// command is what the resume hint pipes the rest of the input into
	// ("enqueue raw").
	command string
	// again says why sending a line twice is harmless, for the resume hint.
	again string
	// convert checks one non-blank line (trimmed) and returns the job to
	// send; its error is reported with the line number, and the line is
	// skipped.
	convert func(ctx context.Context, line string) (client.Message, error)
}

// lineInput is the input of a bulk send: -file, or stdin.
type lineInput struct {
	io.Reader
	file  string // -file, for the resume hint ("" for stdin)
	total int64  // non-blank lines of -file, or -1 when unknown
	close func() error
}

// Close closes the file, if one was opened.
func (in *lineInput) Close() error {
	if in.close == nil {
		return nil
	}
	return in.close()
}

// openLines opens the input of a bulk send: file, or Main.Stdin when file
// is "". A regular file's non-blank lines are counted first when stderr
// is a terminal, so the progress line can show a total.
func (m *Main) openLines(file string) (*lineInput, error) {
	in := &lineInput{Reader: m.Stdin, file: file, total: -1}
	if file != "" {
		f, err := os.Open(file)
		if err != nil {
			return nil, fmt.Errorf("-file: %w", err)
		}
		in.Reader, in.close = f, f.Close
		if st, err := f.Stat(); err == nil && st.Mode().IsRegular() && m.isTerminal(m.Stderr) {
			if in.total, err = countLines(f); err == nil {
				_, err = f.Seek(0, io.SeekStart)
			}
			if err != nil {
				f.Close()
				return nil, fmt.Errorf("-file: %w", err)
			}
		}
	}
	if in.Reader == nil {
		in.Reader = bytes.NewReader(nil)
	}
	return in, nil
}

// sendLines runs a bulk send of in's lines and reports: a progress line
// on stderr when it is a terminal, lines convert refuses on stderr by line
// number (they are skipped), and a summary on stdout. A send error other
// than a refused message (an unreachable or forbidden queue) stops the
// run, since every later line would fail the same way; the report then
// says from which line to resume.
func (m *Main) sendLines(ctx context.Context, in *lineInput, b bulkSend) error {
	r := &bulkRun{
		m:        m,
		bulkSend: b,
		file:     in.file,
		progress: m.isTerminal(m.Stderr),
		total:    in.total,
		start:    time.Now(),
		pending:  map[int]bool{},
	}
	return r.run(ctx, in)
}

// checkConcurrency checks a bulk send's -concurrency.
func checkConcurrency(n int) error {
	if n < 1 || n > client.MaxConcurrency {
		return usagef("-concurrency: must be 1-%d, got %d", client.MaxConcurrency, n)
	}
	return nil
}

// bulkRun is one run of a bulk send.
type bulkRun struct {
	m *Main
	bulkSend
	file     string // -file, for the resume hint
	progress bool
	total    int64 // non-blank lines of -file, or -1 when unknown
	start    time.Time

	read, sent, failed atomic.Int64
	mu                 sync.Mutex // serialises writes to stderr and guards the fields below
	failures           []bulkFailure
	pending            map[int]bool // lines handed to the senders and not yet sent or refused
	lastRead           int          // the last line read
	eof                bool         // the whole input was read
	stopped            error        // the failed send that stopped the run, with its line
}

// bulkFailure is one failed line, as -o json lists it.
type bulkFailure struct {
	Line  int    `json:"line"`
	Error string `json:"error"`
}

// run reads in, sends the valid lines and reports.
func (r *bulkRun) run(ctx context.Context, in io.Reader) error {
	r.m.setFinal(func() {
		sent, failed := r.sent.Load(), r.failed.Load()
		r.mu.Lock()
		defer r.mu.Unlock()
		fmt.Fprintf(r.m.Stderr, "\ninterrupted: sent %d, failed %d, not sent at most %d of %d lines read (some may have reached the queue)\n",
			sent, failed, r.read.Load()-sent-failed, r.read.Load())
	})
	defer r.m.setFinal(nil)
	stopProgress := r.startProgress()
	stream := r.client.Stream(ctx)
	readErr := r.readLines(ctx, in, stream)
	stop := stream.Close()
	stopProgress()
	if r.stopped != nil {
		stop = r.stopped // the same failure, with its line
	}

	sent, failed := r.sent.Load(), r.failed.Load()
	notSent := r.read.Load() - sent - failed
	resume := r.resumeLine()
	if r.asJSON {
		if err := writeJSON(r.m.Stdout, struct {
			Sent     int64         `json:"sent"`
			Failed   int64         `json:"failed"`
			NotSent  int64         `json:"notSent"` // at most: a send cut short may have reached the queue
			Failures []bulkFailure `json:"failures"`
			// ResumeFromLine is the first line not sent, 0 when none.
			ResumeFromLine int `json:"resumeFromLine,omitempty"`
		}{sent, failed, notSent, append([]bulkFailure{}, r.failures...), resume}); err != nil {
			return err
		}
	} else {
		msg := fmt.Sprintf("sent %d, failed %d", sent, failed)
		if notSent > 0 {
			// A send cut short may have reached the queue all the same:
			// the service can take a message and the answer be lost.
			msg += fmt.Sprintf(", not sent at most %d (some may have reached the queue: their sends were cut short)", notSent)
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
	case stop != nil:
		return fmt.Errorf("stopped: %w", stop)
	case failed > 0:
		return fmt.Errorf("%d of %d lines failed", failed, r.read.Load())
	}
	return nil
}

// resumeLine returns the first line that was neither sent nor refused (0
// when every line was): a line whose send was cut short, or the first line
// not read.
func (r *bulkRun) resumeLine() int {
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
func (r *bulkRun) reportNotSent(resume int) {
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
	fmt.Fprintf(r.m.Stderr, "not sent: %s; resume with: tail -n +%d %s | %s (lines after %d that were sent are sent again, which the worker absorbs: %s)\n",
		what, resume, src, r.command, resume, r.again)
}

// readLines reads in line by line, validates and encodes each non-blank
// line and hands the valid ones to stream. It stops early when the stream
// stops.
func (r *bulkRun) readLines(ctx context.Context, in io.Reader, stream *client.Stream) error {
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
			msg, verr := r.convert(ctx, string(line))
			if verr != nil {
				r.failed.Add(1)
				r.fail(n, verr)
				break
			}
			r.mu.Lock()
			r.pending[n] = true
			r.mu.Unlock()
			if stream.Send(msg, func(res client.Result, err error) { r.sendDone(n, res, err) }) != nil {
				r.markRead(n, false)
				return nil // stopped: the line counts as not sent
			}
		}
		if err == io.EOF || stream.Err() != nil {
			r.markRead(n, err == io.EOF)
			return nil
		}
	}
}

// markRead records the last line read and whether the input ended there.
func (r *bulkRun) markRead(n int, eof bool) {
	r.mu.Lock()
	defer r.mu.Unlock()
	r.lastRead, r.eof = n, eof
}

// sendDone records the outcome of one line's send: sent; refused by the
// service (the line failed); or not sent, because the run stopped — and
// when this send is what stopped it, why, with the line.
func (r *bulkRun) sendDone(n int, res client.Result, err error) {
	switch {
	case err == nil:
		r.sent.Add(1)
	case errors.Is(err, client.ErrStopped):
		return // stopping anyway: the line counts as not sent
	case client.Refused(err):
		r.failed.Add(1)
		r.fail(n, jobError(err, res.OpID))
	default:
		// Not the line's fault: it counts as not sent, and the run stops
		// with this error, since every later line would fail the same way.
		r.mu.Lock()
		r.stopped = fmt.Errorf("line %d: %w", n, jobError(err, res.OpID))
		r.mu.Unlock()
		return
	}
	r.mu.Lock()
	delete(r.pending, n)
	r.mu.Unlock()
}

// fail records a failed line and reports it on stderr, the first
// maxShownErrors of them; callers count it.
func (r *bulkRun) fail(n int, err error) {
	r.mu.Lock()
	defer r.mu.Unlock()
	text := r.m.redact(err.Error())
	r.failures = append(r.failures, bulkFailure{Line: n, Error: text})
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
func (r *bulkRun) startProgress() (stop func()) {
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
func (r *bulkRun) drawProgress() {
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
