package integration

import (
	"context"
	"fmt"
	"reflect"
	"strings"
	"testing"
	"time"

	"github.com/envoy-shutdown-manager/shutdown-manager/internal/envoyadmin"
	"github.com/envoy-shutdown-manager/shutdown-manager/internal/testbed"
)

// Contour's readiness endpoint on the real Envoy: a listener whose routes pass GET /ready and /stats to a
// static cluster whose one endpoint is Envoy's own admin address (testbed.AdminRouteListener), on a unix
// socket as Contour's and on TCP. The client's listener configuration marks its manager, and no other, as
// a readiness endpoint; and a drain with a probe on it every 200 ms throughout is not held by them: it
// releases at the 5 s floor, as TestQuietPeriodDefaults' probes-only case does with the health_check
// filter. Before the mark, the probes counted as new traffic and held the drain to its deadline (20 s here).
func TestAdminRoutedReadiness(t *testing.T) {
	forEachEnvoyLine(t, func(t *testing.T, bin testbed.Binary) {
		for _, unix := range []bool{true, false} {
			t.Run(fmt.Sprintf("unix=%v", unix), func(t *testing.T) {
				t.Parallel()
				e := startEnvoy(t, bin, testbed.Options{AdminRouteListener: true, AdminUnix: unix})
				ctx := testContext(t)
				addr, err := envoyadmin.ParseAddress(e.AdminURL)
				if err != nil {
					t.Fatal(err)
				}
				topo, err := envoyadmin.New(addr, envoyadmin.Options{Timeout: 5 * time.Second}).ListenerConfig(ctx)
				if err != nil {
					t.Fatal(err)
				}
				hc := readinessManagers(topo)
				want := map[string][]string{"listener." + testbed.AdminRouteListener: {"http." + testbed.AdminRouteManager}}
				if !reflect.DeepEqual(hc, want) || topo.AdminRoutesUnread != "" {
					t.Errorf("readiness managers by listener = %v (clusters unread: %q), want %v", hc, topo.AdminRoutesUnread, want)
				}

				probeCtx, cancel := context.WithCancel(context.Background())
				defer cancel()
				p := start(t, "drain", "--admin-address", e.AdminURL, "--drain-timeout", "20s", "--log-level", "debug")
				p.waitLog(t, "drain started", 10*time.Second)
				began := time.Now()
				probes := e.ListenerAddrs[testbed.AdminRouteListener]
				newConnections(probeCtx, t, probes, testbed.ReadinessPath, 200*time.Millisecond, began.Add(time.Minute))
				f := p.finished(t, 40*time.Second)
				t.Logf("envoy %s, admin on unix=%v: drain with probes on %s every 200 ms took %s: %s (%s)", bin.Version, unix, probes, f.Duration, f.Outcome, f.Reason)
				// The quiet phase ends at the floor: the probes are no new traffic. (The drain itself may end a
				// little later on a busy machine: a probe in flight is work in flight like any other.)
				quiet := p.quietPhase()
				ended, _ := time.ParseDuration(quiet.str("elapsed"))
				// (At most a second late, plus what kept the process from running: see releasedByDeadline.)
				if late := ended - 5*time.Second; f.Outcome != "drained" || late < 0 || late > time.Second+p.stalledSince(p.begun) ||
					!strings.Contains(quiet.str("reason"), "no new traffic seen") {
					t.Errorf("drain %s after %s (%s), quiet phase ended at %s (%s); want it at the 5 s floor with no new traffic seen: the probes held it",
						f.Outcome, f.Duration, f.Reason, quiet.str("elapsed"), quiet.str("reason"))
				}
			})
		}
	})
}
