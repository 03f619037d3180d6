package drainflag

import (
	"flag"
	"strings"
	"testing"
	"time"

	"github.com/envoy-shutdown-manager/shutdown-manager/internal/drain"
)

// TestTable: names and settings are each a row's only, and every row has help.
func TestTable(t *testing.T) {
	names := map[string]bool{}
	settings := map[drain.Setting]string{}
	for _, f := range All {
		if names[f.Name] {
			t.Errorf("two rows named %s", f.Name)
		}
		names[f.Name] = true
		if f.Help == "" {
			t.Errorf("--%s has no help", f.Name)
		}
		if f.Setting == "" {
			continue
		}
		if other, ok := settings[f.Setting]; ok {
			t.Errorf("--%s and --%s both set %s", other, f.Name, f.Setting)
		}
		settings[f.Setting] = f.Name
	}
}

// stringsValue is a flag.Value of the kind the table leaves without a default (a repeatable flag).
type stringsValue []string

func (v *stringsValue) String() string     { return strings.Join(*v, ",") }
func (v *stringsValue) Set(s string) error { *v = append(*v, s); return nil }

// auto is a flag.Value whose default the table gives as a string.
type auto struct{ s string }

func (a *auto) String() string     { return a.s }
func (a *auto) Set(s string) error { a.s = s; return nil }

// TestVar: Var registers the row's name, default and help for each kind of value.
func TestVar(t *testing.T) {
	var (
		d time.Duration
		n int64
		s string
		l stringsValue
		a auto
	)
	for _, c := range []struct {
		row  Flag
		p    any
		want string // the flag's default as flag shows it
	}{
		{Flag{Name: "d", Default: 5 * time.Second, Help: "a duration"}, &d, "5s"},
		{Flag{Name: "n", Default: int64(3), Help: "a count"}, &n, "3"},
		{Flag{Name: "s", Default: "x", Help: "a string"}, &s, "x"},
		{Flag{Name: "l", Help: "a list"}, &l, ""},
		{Flag{Name: "a", Default: "auto", Help: "a value with a default"}, &a, "auto"},
	} {
		fs := flag.NewFlagSet("test", flag.ContinueOnError)
		c.row.Var(fs, c.p)
		f := fs.Lookup(c.row.Name)
		if f == nil {
			t.Errorf("--%s not registered", c.row.Name)
			continue
		}
		if f.DefValue != c.want || f.Usage != c.row.Help {
			t.Errorf("--%s: default %q, help %q; want %q, %q", c.row.Name, f.DefValue, f.Usage, c.want, c.row.Help)
		}
	}
	if d != 5*time.Second || n != 3 || s != "x" || len(l) != 0 || a.s != "auto" {
		t.Errorf("values after registering: %v %v %q %q %q; want the defaults", d, n, s, l, a.s)
	}
}

// TestVarWrongType: a value of another type than the row's default is a programming error, caught at once.
func TestVarWrongType(t *testing.T) {
	defer func() {
		if recover() == nil {
			t.Error("Var with an *int64 for a duration's row did not panic")
		}
	}()
	var n int64
	DrainDelay.Var(flag.NewFlagSet("test", flag.ContinueOnError), &n)
}

// TestNamed: a setting a row sets is spelled as its flag; any other as its field's name.
func TestNamed(t *testing.T) {
	for _, c := range []struct {
		s    drain.Setting
		want string
	}{
		{drain.SettingDelay, "--drain-delay"},
		{drain.SettingThreshold, "--min-open-connections"},
		{drain.SettingListenerExclude, "--listener-exclude"},
		{drain.Setting("Other"), "Other"},
	} {
		if got := Named(c.s); got != c.want {
			t.Errorf("Named(%s) = %q, want %q", c.s, got, c.want)
		}
	}
}
