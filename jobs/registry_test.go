package jobs_test

import (
	"context"
	"encoding/json"
	"errors"
	"strings"
	"testing"

	"github.com/tablekeeper/tablekeeper/jobs"
	"github.com/tablekeeper/tablekeeper/storeadapter"
)

// greetArgs are a small kind's typed arguments.
type greetArgs struct {
	Name string `json:"name"`
}

func (greetArgs) Kind() string { return "greet" }

func (a greetArgs) Validate() error {
	if a.Name == "" {
		return errors.New("args.name: is required")
	}
	return nil
}

func greetText(t *testing.T, args string) string {
	t.Helper()
	text, err := jobs.Encode(jobs.Envelope{V: 1, ID: "op-1", Kind: "greet", Args: json.RawMessage(args)})
	if err != nil {
		t.Fatal(err)
	}
	return text
}

// TestRegisterTyped: a registered Worker receives its own args type,
// decoded strictly and validated; registering a kind twice is an error.
func TestRegisterTyped(t *testing.T) {
	reg := jobs.NewRegistry(nil)
	var got *jobs.Job[greetArgs]
	if err := jobs.Register(reg, jobs.WorkFunc[greetArgs](func(_ context.Context, job *jobs.Job[greetArgs]) error {
		got = job
		return nil
	})); err != nil {
		t.Fatal(err)
	}
	if err := jobs.RegisterArgs[greetArgs](reg); err == nil || !strings.Contains(err.Error(), `kind "greet" is registered already`) {
		t.Fatalf("second registration of greet: %v, want an error", err)
	}
	task, err := reg.Decode(t.Context(), storeadapter.Message{ID: "m1", Text: greetText(t, `{"name":"Jones"}`)})
	if err != nil {
		t.Fatal(err)
	}
	h, maxRun := reg.Handler("greet")
	if err := h.Handle(t.Context(), task); err != nil {
		t.Fatal(err)
	}
	if got == nil || got.Args.Name != "Jones" || got.ID != "op-1" || got.Message.ID != "m1" || maxRun != jobs.DefaultMaxRunTime {
		t.Fatalf("worker got %+v, max run time %v; want args {Jones}, op-1, message m1 and the default %v", got, maxRun, jobs.DefaultMaxRunTime)
	}
	for args, want := range map[string]string{
		`{"name":""}`:             "args.name: is required",
		`{"name":"a","Name":"b"}`: `args.Name: unknown field (names are case-sensitive: did you mean "name"?)`,
		`{"name":"a","name":"b"}`: "args.name: given twice",
		`{"name":"a","extra":1}`:  "args.extra: unknown field",
		`{"name":1}`:              "args.name: must be a string, got number",
	} {
		if _, err := reg.Decode(t.Context(), storeadapter.Message{Text: greetText(t, args)}); err == nil || !jobs.IsPermanent(err) || !strings.Contains(err.Error(), want) {
			t.Errorf("decode args %s: %v, want a permanent error containing %q", args, err, want)
		}
	}
}

// TestMiddlewareOrder: middleware wraps every handler, the first outermost,
// as asynq's ServeMux.Use.
func TestMiddlewareOrder(t *testing.T) {
	reg := jobs.NewRegistry(nil)
	var trail []string
	if err := jobs.Register(reg, jobs.WorkFunc[greetArgs](func(context.Context, *jobs.Job[greetArgs]) error {
		trail = append(trail, "work")
		return nil
	})); err != nil {
		t.Fatal(err)
	}
	mark := func(name string) jobs.Middleware {
		return func(next jobs.Handler) jobs.Handler {
			return jobs.HandlerFunc(func(ctx context.Context, task *jobs.Task) error {
				trail = append(trail, name+":"+task.Kind)
				return next.Handle(ctx, task)
			})
		}
	}
	reg.Use(mark("outer"), mark("inner"))
	task, err := reg.Decode(t.Context(), storeadapter.Message{Text: greetText(t, `{"name":"x"}`)})
	if err != nil {
		t.Fatal(err)
	}
	h, _ := reg.Handler("greet")
	if err := h.Handle(t.Context(), task); err != nil {
		t.Fatal(err)
	}
	if got := strings.Join(trail, " "); got != "outer:greet inner:greet work" {
		t.Fatalf("calls %q, want the first middleware outermost", got)
	}
}

// TestNewJob: the job a worker called directly gets is the one the queue
// would give it: envelope checked, args decoded strictly and validated.
func TestNewJob(t *testing.T) {
	j, err := jobs.NewJob("op-1", greetArgs{Name: "Ada"})
	if err != nil || j.ID != "op-1" || j.Kind != "greet" || j.V != 1 || j.Args.Name != "Ada" || string(j.Envelope.Args) != `{"name":"Ada"}` {
		t.Fatalf("NewJob = %+v, %v", j, err)
	}
	for _, c := range []struct {
		id   string
		args greetArgs
		want string
	}{
		{"op 1", greetArgs{Name: "Ada"}, "envelope: id: must be 1-128 characters"},
		{"op-1", greetArgs{}, "args.name: is required"},
	} {
		if _, err := jobs.NewJob(c.id, c.args); err == nil || !strings.Contains(err.Error(), c.want) {
			t.Errorf("NewJob(%q, %+v) = %v, want %q", c.id, c.args, err, c.want)
		}
	}
}
