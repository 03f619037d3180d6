package integration

import (
	"bufio"
	"encoding/json"
	"errors"
	"net/http"
	"os/exec"
	"path/filepath"
	"strconv"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/envoy-shutdown-manager/shutdown-manager/internal/testbed"
	"github.com/envoy-shutdown-manager/shutdown-manager/internal/testproc"
)

// Issue 28, item 1: a wrong admin address refuses exactly as a gone Envoy does, and before this change it
// ended envoy_gone with exit 0 after the ~1s gone window, leaving a live Envoy to kubelet's SIGTERM with its
// health checks never failed. The exec hook runs, as in a pod, in Envoy's PID namespace, where it sees
// Envoy's process: an Envoy alive there with its admin address refusing is a configuration error, reported
// loudly (an ERROR line at once, outcome misconfigured, exit 3) and held to the deadline, never a success.
func TestWrongAdminAddressIsMisconfigured(t *testing.T) {
	requireRoot(t)
	forEachEnvoy(t, func(t *testing.T, bin testbed.Binary) {
		// Envoy in a PID namespace of its own, as in its container; its admin on 127.0.0.1:PORT.
		e := startEnvoy(t, bin, testbed.Options{Wrapper: []string{"unshare", "--pid", "--fork", "--mount-proc"}})
		port := e.AdminURL[strings.LastIndex(e.AdminURL, ":")+1:]
		for _, tc := range []struct{ name, admin string }{
			{"wrong port", "http://" + closedPort(t)},
			{"wrong family", "http://[::1]:" + port},
			{"socket outside the container's mounts", "unix:///nonexistent/envoy/admin.sock"},
		} {
			t.Run(tc.name, func(t *testing.T) {
				const timeout = 4 * time.Second
				out, code := hookInNamespace(t, e, "drain", "--admin-address", tc.admin, "--min-drain-duration", "1s",
					"--quiet-period", "0s", "--drain-timeout", timeout.String())
				f, ok := out.finished()
				if !ok {
					t.Fatalf("no \"drain finished\" line:\n%s", out)
				}
				if code != 3 || f.Outcome != "misconfigured" {
					t.Errorf("exit %d, outcome %q (%s); want exit 3, misconfigured", code, f.Outcome, f.Reason)
				}
				if f.Duration < timeout {
					t.Errorf("released after %s, want held to the %s deadline", f.Duration, timeout)
				}
				for _, want := range []string{"configuration error", "refused every connection", "but envoy pid ", " is running"} {
					if !strings.Contains(f.Reason, want) {
						t.Errorf("reason %q does not say %q", f.Reason, want)
					}
				}
				// Told at once, not only at the deadline: the ERROR line comes after about the gone window.
				l, ok := out.line("envoy admin address misconfigured; holding the drain to its deadline")
				if !ok || l.str("level") != "ERROR" || !strings.Contains(l.str("admin_address"), strings.TrimPrefix(tc.admin, "http://")) {
					t.Errorf("no ERROR line naming the address while holding: %v\n%s", l, out)
				} else if at, _ := time.Parse(time.RFC3339Nano, l.str("time")); f.at.Sub(at) < 2*time.Second {
					t.Errorf("misconfiguration told %s before the release, want at once (about the 1s gone window)", f.at.Sub(at))
				}
				if st := envoyState(t, e); st != "LIVE" {
					t.Errorf("envoy state %s; the wrong address cannot have reached it", st)
				}
			})
		}
		// The positive control in the same namespace: the right address drains, exit 0.
		t.Run("right address", func(t *testing.T) {
			out, code := hookInNamespace(t, e, append([]string{"drain", "--admin-address", e.AdminURL}, fast()...)...)
			if f, _ := out.finished(); code != 0 || f.Outcome != "drained" {
				t.Errorf("exit %d, outcome %q (%s); want 0, drained\n%s", code, f.Outcome, f.Reason, out)
			}
		})
	})
}

// The positive control of a gone Envoy: the hook in a container with no Envoy process left (a PID namespace
// of its own, nothing in it) and nothing at the admin address still releases at once: envoy_gone, exit 0.
func TestGoneEnvoyIsStillGoneAtOnce(t *testing.T) {
	requireRoot(t)
	for name, admin := range map[string]string{
		"tcp refused":    "http://" + closedPort(t),
		"socket missing": "unix://" + filepath.Join(t.TempDir(), "admin.sock"),
	} {
		t.Run(name, func(t *testing.T) {
			out, code := hookAlone(t, "drain", "--admin-address", admin, "--min-drain-duration", "1s", "--quiet-period", "0s", "--drain-timeout", "60s")
			f, _ := out.finished()
			if code != 0 || f.Outcome != "envoy_gone" || f.Duration >= 10*time.Second {
				t.Errorf("exit %d, outcome %q after %s (%s); want 0, envoy_gone long before the 60s deadline", code, f.Outcome, f.Duration, f.Reason)
			}
			if !strings.Contains(f.Reason, "refused every connection") || !strings.Contains(f.Reason, "no envoy process is running") {
				t.Errorf("reason %q gives no evidence", f.Reason)
			}
		})
	}
}

// The sidecar cannot see Envoy's processes: its evidence is having reached the admin address. A `serve`
// whose admin socket is not in its view warns within seconds and, when triggered, answers 503
// misconfigured (the hook joining it through --via exits 3); a serve that reached Envoy before still takes a
// refusal for gone, at once.
func TestSidecarEvidence(t *testing.T) {
	forEachEnvoy(t, func(t *testing.T, bin testbed.Binary) {
		t.Run("never reached", func(t *testing.T) {
			e := startEnvoy(t, bin, testbed.Options{AdminUnix: true})
			wrong := "unix://" + filepath.Join(shortTempDir(t), "admin.sock") // another container's socket
			p := start(t, "serve", "--listen", "127.0.0.1:0", "--admin-address", wrong, "--min-drain-duration", "1s",
				"--quiet-period", "0s", "--drain-timeout", "4s")
			a := newAPI(p.waitLog(t, "serving", 10*time.Second).str("listen"))
			w := p.waitLog(t, "envoy admin API has not answered since serve started; check --admin-address: a drain cannot tell this address from a gone envoy and will report a configuration error", 10*time.Second)
			if w.str("level") != "WARN" || w.str("admin_address") != wrong {
				t.Errorf("warning %v, want WARN naming %s", w, wrong)
			}
			hook := start(t, "drain", "--via", "http://"+strings.TrimPrefix(a.base, "http://"), "--admin-address", e.AdminURL, "--drain-timeout", "4s",
				"--min-drain-duration", "1s", "--quiet-period", "0s")
			if code := hook.wait(t, 20*time.Second); code != 3 {
				t.Errorf("drain --via exit %d, want 3 (the sidecar's drain misconfigured)\n%s", code, hook.log())
			}
			f := p.finished(t, 10*time.Second)
			if f.Outcome != "misconfigured" || !strings.Contains(f.Reason, "never answered serve") {
				t.Errorf("serve's outcome %q (%s), want misconfigured with its evidence", f.Outcome, f.Reason)
			}
			code, body, _ := a.get(testContext(t), "/shutdown")
			if code != http.StatusServiceUnavailable || !strings.HasPrefix(body, "misconfigured: ") {
				t.Errorf("/shutdown = %d %q, want 503 misconfigured", code, body)
			}
			if st := envoyState(t, e); st != "LIVE" {
				t.Errorf("envoy state %s, want LIVE (the sidecar never reached it)", st)
			}
		})
		t.Run("reached, then gone", func(t *testing.T) {
			e := startEnvoy(t, bin, testbed.Options{AdminUnix: true})
			p, a := serve(t, e, fast()...)
			p.waitLog(t, "envoy admin API reached", 10*time.Second)
			stopEnvoy(t, e)
			code, body, err := a.get(testContext(t), "/shutdown")
			if err != nil || code != http.StatusOK || !strings.HasPrefix(body, "envoy_gone: ") || !strings.Contains(body, "answered serve at") {
				t.Errorf("/shutdown = %d %q %v, want 200 envoy_gone with its evidence", code, body, err)
			}
			if f := p.finished(t, 10*time.Second); f.Duration >= 10*time.Second {
				t.Errorf("released after %s, want within about the gone window", f.Duration)
			}
		})
	})
}

// hookOutput is the JSON log of a hook run to its end.
type hookOutput string

func (o hookOutput) line(msg string) (logLine, bool) {
	sc := bufio.NewScanner(strings.NewReader(string(o)))
	for sc.Scan() {
		var l logLine
		if json.Unmarshal(sc.Bytes(), &l) == nil && l.str("msg") == msg {
			return l, true
		}
	}
	return nil, false
}

// finishedAt is the "drain finished" line's fields and time.
type finishedAt struct {
	finished
	at time.Time
}

func (o hookOutput) finished() (finishedAt, bool) {
	l, ok := o.line("drain finished")
	if !ok {
		return finishedAt{}, false
	}
	dur, _ := time.ParseDuration(l.str("duration"))
	at, _ := time.Parse(time.RFC3339Nano, l.str("time"))
	return finishedAt{finished{Outcome: l.str("outcome"), Duration: dur, Reason: l.str("reason")}, at}, true
}

// hookInNamespace runs shutdown-manager in Envoy's PID and mount namespaces, as an exec hook in Envoy's
// container runs, and returns its log and exit code.
func hookInNamespace(t *testing.T, e *testbed.Envoy, args ...string) (hookOutput, int) {
	t.Helper()
	out, err := inNamespace(t, e, "", args...)
	return hookOutput(out), exitCode(t, err, out)
}

// hookAlone runs shutdown-manager in a PID namespace of its own, in which no Envoy runs: a container whose
// Envoy has gone.
func hookAlone(t *testing.T, args ...string) (hookOutput, int) {
	t.Helper()
	cmd := exec.CommandContext(testContext(t), "unshare", append([]string{"--pid", "--fork", "--mount-proc", "--kill-child", smBin}, args...)...)
	out, err := cmd.CombinedOutput()
	return hookOutput(out), exitCode(t, err, string(out))
}

func exitCode(t *testing.T, err error, out string) int {
	t.Helper()
	var ee *exec.ExitError
	switch {
	case err == nil:
		return 0
	case errors.As(err, &ee):
		return ee.ExitCode()
	}
	t.Fatalf("running the hook: %v\n%s", err, out)
	return -1
}

// The agent's evidence is its child: a wrong --admin-address while Envoy (its child) runs is a configuration
// error, held to the deadline and logged as such, not envoy_gone after the gone window.
func TestAgentWrongAdminAddressIsMisconfigured(t *testing.T) {
	forEachEnvoy(t, func(t *testing.T, bin testbed.Binary) {
		e, envoyPID := agent(t, bin, "--admin-address", "http://"+closedPort(t), "--min-drain-duration", "500ms",
			"--quiet-period", "0s", "--drain-timeout", "3s", "--stop-timeout", "1s")
		if err := e.Signal(syscall.SIGTERM); err != nil {
			t.Fatal(err)
		}
		_, took := exitOf(t, e, 20*time.Second)
		if took < 3*time.Second {
			t.Errorf("manager exited %s after SIGTERM, want held to the 3s deadline", took)
		}
		log := readLog(t, e)
		for _, want := range []string{`"msg":"envoy admin address misconfigured; holding the drain to its deadline"`,
			`"outcome":"misconfigured"`, "envoy pid " + strconv.Itoa(envoyPID) + " (this process's child) is running"} {
			if !strings.Contains(log, want) {
				t.Errorf("manager log lacks %s:\n%s", want, testproc.LastLines(log, 8))
			}
		}
	})
}

// Another Envoy's admin address (a second Envoy in the pod, or one on the host network): it answers, so no
// refusal shows the mistake, and before this change the hook failed that other Envoy's health checks and
// ended drained, exit 0, its own Envoy never told. The hook sees its Envoy's process: /server_info's -c of
// the answering Envoy is not on its command line, so the admin API is another Envoy's: its health checks are
// not failed, and the drain ends misconfigured (exit 3) at its deadline.
func TestAnotherEnvoysAdminIsMisconfigured(t *testing.T) {
	requireRoot(t)
	forEachEnvoy(t, func(t *testing.T, bin testbed.Binary) {
		ours := startEnvoy(t, bin, testbed.Options{Wrapper: []string{"unshare", "--pid", "--fork", "--mount-proc"}})
		other := startEnvoy(t, bin, testbed.Options{})
		const timeout = 3 * time.Second
		out, code := hookInNamespace(t, ours, "drain", "--admin-address", other.AdminURL, "--min-drain-duration", "1s",
			"--quiet-period", "0s", "--drain-timeout", timeout.String())
		f, _ := out.finished()
		if code != 3 || f.Outcome != "misconfigured" || f.Duration < timeout {
			t.Errorf("exit %d, outcome %q after %s (%s); want exit 3, misconfigured at the %s deadline\n%s", code, f.Outcome, f.Duration, f.Reason, timeout, out)
		}
		if !strings.Contains(f.Reason, "for another envoy") || !strings.Contains(f.Reason, "health checks were not failed") {
			t.Errorf("reason %q does not say why", f.Reason)
		}
		if st := envoyState(t, other); st != "LIVE" {
			t.Errorf("the other envoy's state %s, want LIVE: its health checks must not be failed", st)
		}
	})
}
