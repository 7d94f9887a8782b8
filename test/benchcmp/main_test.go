package main

import (
	"strings"
	"testing"
)

const sampleOutput = `goos: linux
goarch: amd64
pkg: github.com/tablekeeper/tablekeeper/localstore
cpu: AMD EPYC
BenchmarkGetEntity-2      	  106576	     21234 ns/op	     47094 ops/s	     696 B/op	       5 allocs/op
BenchmarkUpsertEntity-2   	   55086	     21204 ns/op	     47161 ops/s	     816 B/op	       9 allocs/op
BenchmarkCompareUTF16/31bytes-2         	100000000	        10.51 ns/op
PASS
ok  	github.com/tablekeeper/tablekeeper/localstore	13.109s
`

func TestParse(t *testing.T) {
	var r results
	r.parse(sampleOutput)
	r.parse(strings.ReplaceAll(sampleOutput, "47094 ops/s", "50000 ops/s"))
	if got, want := strings.Join(r.names, ","), "GetEntity,UpsertEntity,CompareUTF16/31bytes"; got != want {
		t.Errorf("names = %s, want %s", got, want)
	}
	if got, want := strings.Join(r.units["GetEntity"], ","), "ns/op,ops/s,B/op,allocs/op"; got != want {
		t.Errorf("units = %s, want %s", got, want)
	}
	if got := r.values["GetEntity"]["ops/s"]; len(got) != 2 || got[0] != 47094 || got[1] != 50000 {
		t.Errorf("GetEntity ops/s = %v, want [47094 50000]", got)
	}
	if got := r.values["CompareUTF16/31bytes"]["ns/op"]; len(got) != 2 || got[0] != 10.51 {
		t.Errorf("CompareUTF16/31bytes ns/op = %v, want [10.51 10.51]", got)
	}
}

func TestMedian(t *testing.T) {
	for _, c := range []struct {
		vs          []float64
		med, lo, hi float64
	}{
		{[]float64{3}, 3, 3, 3},
		{[]float64{5, 1, 3}, 3, 1, 5},
		{[]float64{4, 1, 2, 3}, 2.5, 1, 4},
	} {
		if med, lo, hi := median(c.vs); med != c.med || lo != c.lo || hi != c.hi {
			t.Errorf("median(%v) = %v, %v, %v; want %v, %v, %v", c.vs, med, lo, hi, c.med, c.lo, c.hi)
		}
	}
}

func TestReport(t *testing.T) {
	var base, next results
	base.parse("BenchmarkGetEntity-2 10 1000 ns/op 100000 ops/s\nBenchmarkGone-2 10 5 ns/op\n")
	next.parse("BenchmarkGetEntity-2 10 500 ns/op 200000 ops/s\nBenchmarkAdded-2 10 7 ns/op\n")
	var b strings.Builder
	if err := report(&b, base, next); err != nil {
		t.Fatal(err)
	}
	lines := strings.Split(strings.TrimSpace(b.String()), "\n")
	want := [][]string{
		{"benchmark", "unit", "base", "median", "(min–max)", "new", "median", "(min–max)", "new/base"},
		{"GetEntity", "ns/op", "1,000", "(1,000–1,000)", "500", "(500–500)", "0.50"},
		{"GetEntity", "ops/s", "100,000", "(100,000–100,000)", "200,000", "(200,000–200,000)", "2.00"},
		{"Gone", "ns/op", "5", "(5–5)", "—"},
		{"Added", "ns/op", "—", "7", "(7–7)"},
	}
	if len(lines) != len(want) {
		t.Fatalf("report has %d lines, want %d:\n%s", len(lines), len(want), b.String())
	}
	for i, w := range want {
		if got := strings.Fields(lines[i]); strings.Join(got, " ") != strings.Join(w, " ") {
			t.Errorf("line %d = %q, want fields %q", i, lines[i], w)
		}
	}
}
