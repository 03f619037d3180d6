package integration

import (
	"encoding/json"
	"fmt"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/envoy-shutdown-manager/shutdown-manager/internal/doctable"
	"github.com/envoy-shutdown-manager/shutdown-manager/internal/testbed"
)

// compatibilityDoc's Envoy table has one column per pinned Envoy line and one row per count mode; TestCountModes
// writes each cell from what `status` counted on that real Envoy (-update) and checks it on every run.
const compatibilityDoc = "../../docs/compatibility.md"

// The work held open while the modes count: one HTTP request in flight, one idle HTTP keep-alive connection, one
// TCP proxy connection. What each mode must count of it is the mode's definition (internal/drain/count.go).
var countModes = []struct{ mode, want string }{
	{"inflight", "2 (the request and the TCP connection)"},
	{"connections", "3 (every connection)"},
	{"requests", "1 (the request)"},
}

// TestCountModes has every count mode count the same held work on every pinned Envoy line, through the listener
// configuration (count basis listener_config), and compares the result with the compatibility matrix.
func TestCountModes(t *testing.T) {
	var mu sync.Mutex
	cells := map[string]map[string]string{} // column -> row -> cell
	forEachEnvoyLine(t, func(t *testing.T, bin testbed.Binary) {
		e := startEnvoy(t, bin, testbed.Options{})
		ctx := t.Context()
		long := testbed.Long(ctx, e.HTTPAddr, 1, time.Minute)
		t.Cleanup(long.Stop)
		waitInFlight(t, e, 1)
		pool, err := testbed.IdlePool(ctx, e.HTTPAddr, 1)
		if err != nil {
			t.Fatal(err)
		}
		t.Cleanup(pool.Close)
		holdTCP(ctx, t, e, time.Minute)
		waitStat(t, e, "http.ingress_http.downstream_cx_active", 2)

		column := map[string]string{}
		for _, m := range countModes {
			out, err := runStatus(ctx, e.AdminURL, "-o", "json", "--count", m.mode)
			if err != nil {
				t.Fatalf("status --count %s: %v\n%s", m.mode, err, out)
			}
			var rep struct {
				Open       int64  `json:"open"`
				CountBasis string `json:"count_basis"`
			}
			if err := json.Unmarshal([]byte(out), &rep); err != nil {
				t.Fatalf("status --count %s: %v: %s", m.mode, err, out)
			}
			cell := fmt.Sprintf("%d", rep.Open)
			if got, want := cell, strings.Fields(m.want)[0]; got != want || rep.CountBasis != "listener_config" {
				t.Errorf("--count %s on Envoy %s: %s open, counted by %q; want %s, by listener_config", m.mode, bin.Version, got, rep.CountBasis, m.want)
				cell += " (want " + m.want + ")"
			} else {
				cell = m.want
			}
			column["`--count "+m.mode+"`"] = cell + ", counted by " + rep.CountBasis
		}
		mu.Lock()
		cells["Envoy "+bin.Version] = column
		mu.Unlock()
		long.Stop()
	})
	if t.Failed() || len(cells) == 0 {
		return
	}
	doc, err := os.ReadFile(compatibilityDoc)
	if err != nil {
		t.Fatal(err)
	}
	text := string(doc)
	if os.Getenv(testbed.EnvVarBinary) == "" {
		// Every pinned line ran (FindBinaries fails otherwise): the table has their columns and no other.
		pins, err := testbed.Pinned()
		if err != nil {
			t.Fatal(err)
		}
		pinned := map[string]bool{}
		for _, p := range pins {
			pinned["Envoy "+p.Version] = true
		}
		if text, err = doctable.KeepColumns(text, "| count mode |", func(c string) bool { return pinned[c] }); err != nil {
			t.Fatal(err)
		}
	}
	columns := make([]string, 0, len(cells))
	for c := range cells {
		columns = append(columns, c)
	}
	slices.Sort(columns)
	for _, c := range columns {
		if text, err = doctable.SetColumn(text, "| count mode |", c, cells[c]); err != nil {
			t.Fatal(err)
		}
	}
	if text == string(doc) {
		return
	}
	if *update {
		if err := os.WriteFile(compatibilityDoc, []byte(text), 0o644); err != nil {
			t.Fatal(err)
		}
		t.Logf("%s: the Envoy table rewritten for %v", filepath.Base(compatibilityDoc), columns)
		return
	}
	t.Errorf("%s does not say what the pinned Envoy lines counted (or has a column for a line no longer pinned); `go test ./test/integration -run TestCountModes -update` rewrites it. Counted: %v", compatibilityDoc, cells)
}
