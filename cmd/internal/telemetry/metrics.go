package telemetry

import (
	"context"
	"errors"
	"fmt"
	"maps"
	"slices"
	"strings"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	"github.com/prometheus/client_golang/prometheus/collectors"
	dto "github.com/prometheus/client_model/go"

	"github.com/tablekeeper/tablekeeper/jobs/runner"
	"github.com/tablekeeper/tablekeeper/storeadapter"
	"github.com/tablekeeper/tablekeeper/storeadapter/instrument"
)

// UnknownKind is the kind label of a message whose envelope did not decode
// or whose kind this worker does not run, so the label stays bounded by the
// kinds registered.
const UnknownKind = "unknown"

// Outcomes are the outcome label values of tablekeeper_jobs_finished_total,
// by the runner's outcome event.
var Outcomes = map[runner.EventType]string{
	runner.Succeeded: "succeeded", runner.Retried: "retried", runner.Poisoned: "poisoned", runner.Continued: "continued",
	runner.LeaseLost: "lease_lost", runner.Released: "released", runner.AckFailed: "ack_failed", runner.Abandoned: "abandoned",
}

// The reason classes of tablekeeper_messages_poisoned_total.
const (
	ReasonPermanent     = "permanent"      // a jobs.Permanent error: malformed message, invalid args, handler panic
	ReasonRefused       = "refused"        // storage refused the request itself (400, 413)
	ReasonDequeueCount  = "dequeue_count"  // transient failures until the delivery count reached the maximum
	ReasonOverDelivered = "over_delivered" // delivered more times than the maximum without finishing (crashes, lost leases)
	ReasonOther         = "other"
)

// reasons lists the reason classes, for the series made at start.
var reasons = []string{ReasonPermanent, ReasonRefused, ReasonDequeueCount, ReasonOverDelivered, ReasonOther}

// DurationBuckets are the job duration histogram's upper bounds in
// seconds: from a single entity move (milliseconds) to a long export's
// delivery (its time budget, 5 min by default, and up to maxRunTime).
var DurationBuckets = []float64{0.005, 0.01, 0.025, 0.05, 0.1, 0.25, 0.5, 1, 2.5, 5, 10, 30, 60, 120, 300, 600, 1800}

// StorageBuckets are the storage latency histogram's upper bounds in
// seconds: from a fast table read (milliseconds) through the SDK's retries
// (seconds) to the per-try (30 s) and per-call (2 min) time bounds.
var StorageBuckets = []float64{0.0025, 0.005, 0.01, 0.025, 0.05, 0.1, 0.25, 0.5, 1, 2.5, 5, 10, 30, 60, 120}

// Metrics holds the worker's metrics in their own registry (with the Go
// runtime and process collectors). Create it with New.
type Metrics struct {
	Registry *prometheus.Registry

	kinds           map[string]bool
	maxDequeueCount int64

	received      prometheus.Counter
	finished      *prometheus.CounterVec
	retried       *prometheus.CounterVec
	poisoned      *prometheus.CounterVec
	renewals      prometheus.Counter
	leasesLost    prometheus.Counter
	outboxDropped *prometheus.CounterVec
	duration      *prometheus.HistogramVec
	storage       *prometheus.CounterVec
	storageFailed *prometheus.CounterVec
	storageTime   *prometheus.HistogramVec
	depth         *prometheus.GaugeVec
	poisonDepth   *prometheus.GaugeVec
	oldest        *prometheus.GaugeVec
	sampled       *prometheus.GaugeVec
	sampleFailure *prometheus.CounterVec
}

// New returns the metrics of a worker running kinds (the registry's), with
// maxDequeueCount the runner's (it tells an over-delivered poisoning from
// one that reached the maximum). Every series of a known label set starts
// at zero, so rates and alerts work from the first scrape.
func New(kinds []string, maxDequeueCount int64) *Metrics {
	m := &Metrics{Registry: prometheus.NewRegistry(), kinds: map[string]bool{}, maxDequeueCount: maxDequeueCount}
	for _, k := range kinds {
		m.kinds[k] = true
	}
	m.received = prometheus.NewCounter(prometheus.CounterOpts{Name: "tablekeeper_messages_received_total",
		Help: "Messages received from the work queue (each delivery counts)."})
	m.finished = prometheus.NewCounterVec(prometheus.CounterOpts{Name: "tablekeeper_jobs_finished_total",
		Help: "Received messages by kind and outcome: succeeded, retried, poisoned, continued, lease_lost, released, ack_failed, abandoned."}, []string{"kind", "outcome"})
	m.retried = prometheus.NewCounterVec(prometheus.CounterOpts{Name: "tablekeeper_jobs_retried_total",
		Help: "Deliveries that failed transiently and were scheduled to come back after a backoff, by kind."}, []string{"kind"})
	m.poisoned = prometheus.NewCounterVec(prometheus.CounterOpts{Name: "tablekeeper_messages_poisoned_total",
		Help: "Messages moved to the poison queue, by kind and reason class: permanent, refused, dequeue_count, over_delivered, other."}, []string{"kind", "reason"})
	m.renewals = prometheus.NewCounter(prometheus.CounterOpts{Name: "tablekeeper_lease_renewals_total",
		Help: "Successful lease renewals (visibility updates) of running messages."})
	m.leasesLost = prometheus.NewCounter(prometheus.CounterOpts{Name: "tablekeeper_leases_lost_total",
		Help: "Messages whose lease was lost (another worker may have them)."})
	m.outboxDropped = prometheus.NewCounterVec(prometheus.CounterOpts{Name: "tablekeeper_outbox_dropped_total",
		Help: "Jobs of transactional enqueues dropped because their transaction never committed (no outbox row after the commit window), by kind."}, []string{"kind"})
	m.duration = prometheus.NewHistogramVec(prometheus.HistogramOpts{Name: "tablekeeper_job_duration_seconds",
		Help: "How long each processed delivery ran, by kind (refused messages included).", Buckets: DurationBuckets}, []string{"kind"})
	m.storage = prometheus.NewCounterVec(prometheus.CounterOpts{Name: "tablekeeper_storage_calls_total",
		Help: "Storage calls (the bill) by service (table, queue, blob), operation and status (ok or the error class)."}, []string{"service", "operation", "status"})
	m.storageFailed = prometheus.NewCounterVec(prometheus.CounterOpts{Name: "tablekeeper_storage_failures_total",
		Help: "Storage calls that failed, by service, operation and status: every error but the expected answers idempotent code handles (not_found and the *_not_found, already_exists, precondition_failed, pop_receipt_mismatch), which tablekeeper_storage_calls_total counts with the rest."}, []string{"service", "operation", "status"})
	m.storageTime = prometheus.NewHistogramVec(prometheus.HistogramOpts{Name: "tablekeeper_storage_call_duration_seconds",
		Help:    "How long each storage call took as the worker saw it (the SDK's retries included), by service (table, queue, blob) and operation, whatever its status.",
		Buckets: StorageBuckets}, []string{"service", "operation"})
	m.depth = prometheus.NewGaugeVec(prometheus.GaugeOpts{Name: "tablekeeper_queue_depth",
		Help: "Approximate message count of the work queue (visible or not), sampled."}, []string{"queue"})
	m.poisonDepth = prometheus.NewGaugeVec(prometheus.GaugeOpts{Name: "tablekeeper_poison_queue_depth",
		Help: "Approximate message count of the poison queue, sampled (0 when it does not exist yet)."}, []string{"queue"})
	m.oldest = prometheus.NewGaugeVec(prometheus.GaugeOpts{Name: "tablekeeper_queue_oldest_message_age_seconds",
		Help: "Age of the oldest visible message of the work queue (now minus its insertion time; 0 when none is visible), sampled."}, []string{"queue"})
	m.sampled = prometheus.NewGaugeVec(prometheus.GaugeOpts{Name: "tablekeeper_queue_sampled_timestamp_seconds",
		Help: "When the queue gauges were last sampled successfully (Unix time)."}, []string{"queue"})
	m.sampleFailure = prometheus.NewCounterVec(prometheus.CounterOpts{Name: "tablekeeper_queue_sample_failures_total",
		Help: "Samples of the queue gauges that failed (the gauges keep their last values)."}, []string{"queue"})
	m.Registry.MustRegister(m.received, m.finished, m.retried, m.poisoned, m.renewals, m.leasesLost, m.outboxDropped, m.duration, m.storage, m.storageFailed, m.storageTime,
		m.depth, m.poisonDepth, m.oldest, m.sampled, m.sampleFailure,
		collectors.NewGoCollector(), collectors.NewProcessCollector(collectors.ProcessCollectorOpts{}))
	for _, k := range append(slices.Sorted(maps.Keys(m.kinds)), UnknownKind) {
		for _, o := range Outcomes {
			m.finished.WithLabelValues(k, o)
		}
		for _, r := range reasons {
			m.poisoned.WithLabelValues(k, r)
		}
		m.retried.WithLabelValues(k)
		m.outboxDropped.WithLabelValues(k)
		m.duration.WithLabelValues(k)
	}
	return m
}

// kind returns the bounded kind label of an event.
func (m *Metrics) kind(e runner.Event) string {
	if m.kinds[e.Envelope.Kind] {
		return e.Envelope.Kind
	}
	return UnknownKind
}

// ReasonClass classes why a message was poisoned, from its Poisoned event:
// the runner poisons a permanent or refused failure at once, a transient
// one at the maximum dequeue count, and a message delivered more often
// than that without running.
func ReasonClass(e runner.Event, maxDequeueCount int64) string {
	switch e.Class {
	case runner.ClassPermanent:
		return ReasonPermanent
	case runner.ClassRefused:
		return ReasonRefused
	case runner.ClassTransient:
		if e.Message.DequeueCount > maxDequeueCount {
			return ReasonOverDelivered
		}
		return ReasonDequeueCount
	}
	return ReasonOther
}

// Observe counts one runner event; *Metrics is the runner.Observer to add
// to runner.Config.Observers. It never blocks.
func (m *Metrics) Observe(_ context.Context, e runner.Event) {
	switch e.Type {
	case runner.Received:
		m.received.Inc()
		return
	case runner.LeaseRenewed:
		m.renewals.Inc()
		return
	case runner.Finished:
		// A drop is decided, its fence written, once per operation: on
		// the Finished event of the delivery that found no row after the
		// window (its outcome is a continuation, or a success when there
		// was no table to fence; a later delivery that finds the fence
		// reports another outcome).
		m.duration.WithLabelValues(m.kind(e)).Observe(e.Duration.Seconds())
		if e.Outbox == runner.OutboxDropped {
			m.outboxDropped.WithLabelValues(m.kind(e)).Inc()
		}
		return
	}
	outcome, ok := Outcomes[e.Type]
	if !ok {
		return // Started
	}
	kind := m.kind(e)
	m.finished.WithLabelValues(kind, outcome).Inc()
	switch e.Type {
	case runner.Retried:
		m.retried.WithLabelValues(kind).Inc()
	case runner.Poisoned:
		m.poisoned.WithLabelValues(kind, ReasonClass(e, m.maxDequeueCount)).Inc()
	case runner.LeaseLost:
		m.leasesLost.Inc()
	}
}

var _ runner.Observer = (*Metrics)(nil)

// Storage returns the instrument.Observer that counts storage calls into
// tablekeeper_storage_calls_total, the failed ones (errors that are not
// expected answers, see instrument.Expected) into
// tablekeeper_storage_failures_total too, and times them into
// tablekeeper_storage_call_duration_seconds; pass it in
// instrument.Options.Observers of the store the worker uses.
func (m *Metrics) Storage() instrument.Observer {
	return instrument.ObserverFunc(func(c instrument.Call, took time.Duration, err error) {
		service, op, status := c.Op.Service(), string(c.Op), Status(err)
		m.storage.WithLabelValues(service, op, status).Inc()
		if err != nil && !instrument.Expected(err) {
			m.storageFailed.WithLabelValues(service, op, status).Inc()
		}
		m.storageTime.WithLabelValues(service, op).Observe(took.Seconds())
	})
}

// statuses name the error classes of Status, most precise first (the
// missing-container sentinels wrap ErrNotFound).
var statuses = []struct {
	err  error
	name string
}{
	{storeadapter.ErrTableNotFound, "table_not_found"},
	{storeadapter.ErrQueueNotFound, "queue_not_found"},
	{storeadapter.ErrContainerNotFound, "container_not_found"},
	{storeadapter.ErrNotFound, "not_found"},
	{storeadapter.ErrAlreadyExists, "already_exists"},
	{storeadapter.ErrPreconditionFailed, "precondition_failed"},
	{storeadapter.ErrTableBeingDeleted, "table_being_deleted"},
	{storeadapter.ErrPopReceiptMismatch, "pop_receipt_mismatch"},
	{storeadapter.ErrTooLarge, "too_large"},
	{storeadapter.ErrInvalidInput, "invalid_input"},
	{storeadapter.ErrForbidden, "forbidden"},
	{storeadapter.ErrUnavailable, "unavailable"},
	{context.Canceled, "canceled"},
	{context.DeadlineExceeded, "unavailable"},
}

// Status is the status label of a storage call that returned err: "ok", or
// its error class, the storeadapter sentinel it wraps in snake case
// ("not_found", "precondition_failed", "unavailable", …); a network
// failure is "unavailable", anything else "other". The sentinels are what
// every store returns, so the label is the same on Azure and in tests.
func Status(err error) string {
	if err == nil {
		return "ok"
	}
	for _, s := range statuses {
		if errors.Is(err, s.err) {
			return s.name
		}
	}
	if storeadapter.IsTransient(err) {
		return "unavailable"
	}
	return "other"
}

// Totals are the counters of Metrics at one moment, as the exit summary
// prints them.
type Totals struct {
	Received   int64
	Outcomes   map[string]int64 // by outcome label, summed over kinds
	Retried    int64
	Poisoned   map[string]int64 // by reason class, summed over kinds
	Renewals   int64
	LeasesLost int64
	// OutboxDropped counts the jobs dropped because their transaction
	// never committed, summed over kinds.
	OutboxDropped int64
	// Storage is the number of storage calls by operation; StorageErrors
	// the calls that failed; StorageExpected the calls answered with an
	// expected answer (not found, already exists, precondition failed, pop
	// receipt mismatch: see instrument.Expected), which idempotent code
	// handles as normal outcomes.
	Storage         map[string]int64
	StorageErrors   int64
	StorageExpected int64
}

// StorageCalls is the sum of Storage.
func (t Totals) StorageCalls() int64 {
	var n int64
	for _, v := range t.Storage {
		n += v
	}
	return n
}

// Totals gathers the counters from the registry, as a scrape would see
// them.
func (m *Metrics) Totals() (Totals, error) {
	fams, err := m.Registry.Gather()
	if err != nil {
		return Totals{}, err
	}
	t := Totals{Outcomes: map[string]int64{}, Poisoned: map[string]int64{}, Storage: map[string]int64{}}
	for _, f := range fams {
		for _, s := range f.GetMetric() {
			v := int64(s.GetCounter().GetValue())
			label := func(name string) string { return labelValue(s, name) }
			switch f.GetName() {
			case "tablekeeper_messages_received_total":
				t.Received += v
			case "tablekeeper_jobs_finished_total":
				t.Outcomes[label("outcome")] += v
			case "tablekeeper_jobs_retried_total":
				t.Retried += v
			case "tablekeeper_messages_poisoned_total":
				t.Poisoned[label("reason")] += v
			case "tablekeeper_lease_renewals_total":
				t.Renewals += v
			case "tablekeeper_leases_lost_total":
				t.LeasesLost += v
			case "tablekeeper_outbox_dropped_total":
				t.OutboxDropped += v
			case "tablekeeper_storage_calls_total":
				if v == 0 {
					continue
				}
				t.Storage[label("operation")] += v
				if label("status") != "ok" {
					t.StorageExpected += v // less the failures, below
				}
			case "tablekeeper_storage_failures_total":
				t.StorageErrors += v
				t.StorageExpected -= v
			}
		}
	}
	return t, nil
}

func labelValue(s *dto.Metric, name string) string {
	for _, l := range s.GetLabel() {
		if l.GetName() == name {
			return l.GetValue()
		}
	}
	return ""
}

// Attrs are the summary's log attributes: every counter, non-zero poison
// reasons, and the storage calls with their total, their failures, their
// expected answers and their count per operation ("GetEntity=3
// Receive=12", in name order).
func (t Totals) Attrs() []any {
	attrs := []any{"messages_received", t.Received}
	for _, o := range slices.Sorted(maps.Values(Outcomes)) {
		attrs = append(attrs, "finished_"+o, t.Outcomes[o])
	}
	attrs = append(attrs, "jobs_retried", t.Retried, "poisoned_by_reason", joinCounts(t.Poisoned),
		"lease_renewals", t.Renewals, "leases_lost", t.LeasesLost, "outbox_dropped", t.OutboxDropped,
		"storage_calls", t.StorageCalls(), "storage_errors", t.StorageErrors, "storage_expected", t.StorageExpected,
		"storage_calls_by_op", joinCounts(t.Storage))
	return attrs
}

// joinCounts renders the non-zero counts as "name=n" in name order.
func joinCounts(m map[string]int64) string {
	var parts []string
	for _, k := range slices.Sorted(maps.Keys(m)) {
		if m[k] != 0 {
			parts = append(parts, fmt.Sprintf("%s=%d", k, m[k]))
		}
	}
	return strings.Join(parts, " ")
}
