package integration

import (
	"strings"
	"testing"

	"github.com/envoy-shutdown-manager/shutdown-manager/internal/testbed"
)

// resume, like drain and status, finds Envoy's admin address from Envoy's process when it can see it: in
// Envoy's container (here a PID namespace of its own, the admin a unix socket) undoing a drain needs no flag.
func TestResumeFindsEnvoysAdmin(t *testing.T) {
	requireRoot(t)
	forEachEnvoy(t, func(t *testing.T, bin testbed.Binary) {
		e := startEnvoy(t, bin, testbed.Options{AdminUnix: true, Wrapper: []string{"unshare", "--pid", "--fork", "--mount-proc"}})
		if out, err := inNamespace(t, e, "", append([]string{"drain"}, fast()...)...); err != nil {
			t.Fatalf("drain failed: %v\n%s", err, out)
		}
		if st := envoyState(t, e); st != "DRAINING" {
			t.Fatalf("envoy state %s after the drain, want DRAINING", st)
		}
		out, err := inNamespace(t, e, "", "resume")
		if err != nil {
			t.Fatalf("resume without --admin-address failed: %v\n%s", err, out)
		}
		if !strings.Contains(out, "admin address: read from envoy's bootstrap") {
			t.Errorf("resume did not say where it found the admin address:\n%s", out)
		}
		if st := envoyState(t, e); st != "LIVE" {
			t.Errorf("envoy state %s after resume, want LIVE\n%s", st, out)
		}
	})
}
