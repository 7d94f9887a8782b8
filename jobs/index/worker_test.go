package index

import (
	"strings"
	"testing"

	"github.com/tablekeeper/tablekeeper/storeadapter"
)

func ptr(s string) *string { return &s }

func TestArgsValidate(t *testing.T) {
	for _, tc := range []struct {
		a    Args
		want string
	}{
		{Args{Table: "T"}, "args.table"},
		{Args{Table: "Tab", RK: ptr("r")}, "args.pk: is required"},
		{Args{Table: "Tab", PK: ptr("p")}, "args.rk: is required"},
		{Args{Table: "Tab", PK: ptr("p"), RK: ptr(storeadapter.ReservedPrefix + "m.x")}, "reserved"},
		{Args{Table: "Tab", Rebuild: true, RK: ptr("r")}, "args.rk: a rebuild"},
		{Args{Table: "Tab", PK: ptr("p/q"), RK: ptr("r")}, "args.pk"},
	} {
		if err := tc.a.Validate(); err == nil || !strings.Contains(err.Error(), tc.want) {
			t.Errorf("%+v: %v, want %q", tc.a, err, tc.want)
		}
	}
	for _, a := range []Args{{Table: "Tab", PK: ptr("p"), RK: ptr("r")}, {Table: "Tab", Rebuild: true}, {Table: "Tab", Rebuild: true, PK: ptr("p")}} {
		if err := a.Validate(); err != nil {
			t.Errorf("%+v: %v", a, err)
		}
	}
}
