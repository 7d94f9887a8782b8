package telemetry_test

import (
	"testing"

	dto "github.com/prometheus/client_model/go"

	"github.com/tablekeeper/tablekeeper/cmd/internal/telemetry"
)

// find returns the gathered series of family name whose labels are
// exactly labels (name, value pairs).
func find(t *testing.T, m *telemetry.Metrics, name string, labels ...string) *dto.Metric {
	t.Helper()
	fams, err := m.Registry.Gather()
	if err != nil {
		t.Fatal(err)
	}
	for _, f := range fams {
		if f.GetName() != name {
			continue
		}
	series:
		for _, s := range f.GetMetric() {
			if len(s.GetLabel())*2 != len(labels) {
				continue
			}
			for i := 0; i < len(labels); i += 2 {
				found := false
				for _, l := range s.GetLabel() {
					found = found || l.GetName() == labels[i] && l.GetValue() == labels[i+1]
				}
				if !found {
					continue series
				}
			}
			return s
		}
	}
	t.Fatalf("no series %s%v", name, labels)
	return nil
}

func mustCounter(t *testing.T, m *telemetry.Metrics, name string, labels ...string) float64 {
	t.Helper()
	return find(t, m, name, labels...).GetCounter().GetValue()
}

func mustGauge(t *testing.T, m *telemetry.Metrics, name, queue string) float64 {
	t.Helper()
	return find(t, m, name, "queue", queue).GetGauge().GetValue()
}

func histogram(t *testing.T, m *telemetry.Metrics, kind string) *dto.Histogram {
	t.Helper()
	return find(t, m, "tablekeeper_job_duration_seconds", "kind", kind).GetHistogram()
}
