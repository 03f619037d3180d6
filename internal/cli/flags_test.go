package cli

import (
	"bytes"
	"context"
	"flag"
	"io"
	"strings"
	"testing"
)

// A log destination that cannot be opened at run time is not a usage error: the logger falls back to
// stderr with one warning (a hook that exits 2 instead of draining loses requests).
func TestLogOutputFallsBackToStderr(t *testing.T) {
	for _, out := range []string{"/nonexistent-dir/drain.log", "/proc/self/nonexistent"} {
		var stdout, stderr bytes.Buffer
		lf := LogFlags{format: "json", level: "info", output: out}
		log, closeLog, err := lf.Logger(&stdout, &stderr)
		if err != nil {
			t.Fatalf("--log-output %s: %v, want a fallback", out, err)
		}
		log.Info("drain started")
		closeLog()
		lines := strings.Split(strings.TrimSpace(stderr.String()), "\n")
		if len(lines) != 2 || !strings.Contains(lines[0], "log destination unavailable") || !strings.Contains(lines[0], out) || !strings.Contains(lines[1], "drain started") {
			t.Errorf("--log-output %s: stderr %q; want one warning naming it, then the log", out, stderr.String())
		}
	}
}

// FuzzDrainFlags feeds arbitrary values to the flags that take expressions and addresses: parsing never
// panics, and whatever it accepts is a valid engine configuration.
func FuzzDrainFlags(f *testing.F) {
	f.Add("http://127.0.0.1:9901", "^listener\\.", "admin|19001", "inflight", "none")
	f.Add("unix:///run/admin.sock", "", "(", "connections", "all")
	f.Add("[::1]:1", "x{2,}", "\\p{L}", "requests", "inbound")
	f.Fuzz(func(t *testing.T, admin, include, exclude, count, listeners string) {
		fs := flag.NewFlagSet("drain", flag.ContinueOnError)
		var df drainFlags
		df.register(fs)
		args := []string{"--admin-address", admin, "--count", count, "--drain-listeners", listeners}
		if include != "" {
			args = append(args, "--listener-include", include)
		}
		if exclude != "" {
			args = append(args, "--listener-exclude", exclude)
		}
		if err := Parse(fs, args, io.Discard); err != nil {
			return
		}
		ec, err := df.config()
		if err != nil {
			return
		}
		cfg, addr := ec.Drain, ec.Admin
		if err := cfg.Validate(); err != nil {
			t.Fatalf("accepted flags %q give an invalid config: %v", args, err)
		}
		if addr.Network != "tcp" && addr.Network != "unix" {
			t.Fatalf("accepted admin address %q gives network %q", admin, addr.Network)
		}
	})
}

func TestRunConfig(t *testing.T) {
	tests := []struct {
		name    string
		args    []string
		timeout string // the drain timeout that results
		wantErr string
	}{
		{"grace sets the drain timeout", []string{"--termination-grace-period", "75s", "--admin-address", "http://127.0.0.1:9901"}, "1m8s", ""},
		{"an explicit drain timeout wins", []string{"--termination-grace-period", "75s", "--drain-timeout", "20s", "--admin-address", "http://127.0.0.1:9901"}, "20s", ""},
		{"grace too short", []string{"--termination-grace-period", "10s", "--admin-address", "http://127.0.0.1:9901"}, "", "--termination-grace-period"},
		{"no admin address and no bootstrap", []string{}, "", "--admin-address not given"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			fs := flag.NewFlagSet("run", flag.ContinueOnError)
			var f runFlags
			f.register(fs)
			if err := Parse(fs, tt.args, io.Discard); err != nil {
				t.Fatal(err)
			}
			cfg, err := f.config(fs, []string{"sh", "-c", "true"})
			if tt.wantErr != "" {
				if err == nil || !strings.Contains(err.Error(), tt.wantErr) {
					t.Fatalf("err = %v, want one about %q", err, tt.wantErr)
				}
				return
			}
			if err != nil {
				t.Fatal(err)
			}
			if got := cfg.Engine.Drain.Timeout.String(); got != tt.timeout {
				t.Errorf("drain timeout = %s, want %s", got, tt.timeout)
			}
		})
	}
}

// --quiet-period: auto (the default) turns the adaptive rule on; a duration is a fixed silence, 0 none.
func TestQuietPeriodFlag(t *testing.T) {
	tests := []struct {
		args     []string
		adaptive bool
		fixed    string
	}{
		{nil, true, "0s"},
		{[]string{"--quiet-period", "auto"}, true, "0s"},
		{[]string{"--quiet-period", "3s"}, false, "3s"},
		{[]string{"--quiet-period=0"}, false, "0s"},
	}
	for _, tt := range tests {
		fs := flag.NewFlagSet("drain", flag.ContinueOnError)
		var f drainFlags
		f.register(fs)
		if err := Parse(fs, append([]string{"--admin-address", "http://127.0.0.1:9901"}, tt.args...), io.Discard); err != nil {
			t.Fatal(err)
		}
		cfg, err := f.config()
		if err != nil {
			t.Fatalf("%v: %v", tt.args, err)
		}
		if d := cfg.Drain; d.AdaptiveQuiet != tt.adaptive || d.QuietPeriod.String() != tt.fixed {
			t.Errorf("%v: adaptive %v, quiet period %s; want %v, %s", tt.args, d.AdaptiveQuiet, d.QuietPeriod, tt.adaptive, tt.fixed)
		}
	}
}

func TestRunNeedsEnvoyCommand(t *testing.T) {
	for _, args := range [][]string{{"run"}, {"run", "--"}, {"run", "--", "/no/such/envoy"}} {
		var stdout, stderr bytes.Buffer
		if code := Run(context.Background(), append(args[:1:1], append([]string{"--admin-address", "http://127.0.0.1:9901"}, args[1:]...)...), nil, &stdout, &stderr); code != ExitUsage {
			t.Errorf("%v: exit %d (%s), want 2", args, code, stderr.String())
		}
	}
}

// TestRunAdminFromEnvoyCommand: without --admin-address, run reads it from Envoy's command after -- as Envoy
// reads it (the flag and its value in one argument too), and refuses a command line Envoy would refuse.
func TestRunAdminFromEnvoyCommand(t *testing.T) {
	v6 := "admin: {address: {socket_address: {address: '::1', port_value: 19000}}}"
	tests := []struct {
		name      string
		envoy     []string
		wantAdmin string
		wantErr   string
	}{
		{"two arguments", []string{"sh", "--config-yaml", v6}, "http://[::1]:19000", ""},
		{"one argument (Envoy Gateway v1.2-v1.5)", []string{"sh", "--service-cluster default", "--config-yaml " + v6, "--log-level warn"}, "http://[::1]:19000", ""},
		{"flag=value, which Envoy refuses", []string{"sh", "--config-yaml=" + v6}, "", "not by ="},
		{"a flag Envoy does not have", []string{"sh", "--config-yaml", v6, "--key1", "val1"}, "", "none of envoy's flags"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			fs := flag.NewFlagSet("run", flag.ContinueOnError)
			var f runFlags
			f.register(fs)
			if err := Parse(fs, nil, io.Discard); err != nil {
				t.Fatal(err)
			}
			cfg, err := f.config(fs, tt.envoy)
			if tt.wantErr != "" {
				if err == nil || !strings.Contains(err.Error(), tt.wantErr) || !strings.Contains(err.Error(), "--admin-address not given") {
					t.Fatalf("err = %v, want a usage error about --admin-address and %q", err, tt.wantErr)
				}
				return
			}
			if err != nil {
				t.Fatal(err)
			}
			if got := cfg.Engine.Admin.String(); got != tt.wantAdmin {
				t.Errorf("admin address %s, want %s", got, tt.wantAdmin)
			}
		})
	}
}
