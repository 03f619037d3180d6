package kubecli

import (
	"bytes"
	"context"
	"flag"
	"fmt"
	"regexp"
	"slices"
	"strings"
	"testing"

	"github.com/envoy-shutdown-manager/shutdown-manager/internal/cli"
	"github.com/envoy-shutdown-manager/shutdown-manager/internal/drainflag"
	"github.com/envoy-shutdown-manager/shutdown-manager/internal/inject"
)

// drainCommandFlags are the flag sets of the commands inject writes into pods: drain (hook mode, the exec hooks),
// serve (the sidecar) and run (agent mode), as each parses its arguments (cli.FlagSetOf).
func drainCommandFlags() map[string]*flag.FlagSet {
	sets := map[string]*flag.FlagSet{}
	for _, name := range []string{"drain", "serve", "run"} {
		sets[name] = cli.FlagSetOf(context.Background(), cli.PodCommand(name))
	}
	return sets
}

// TestDrainFlagsCarried: drain, serve and run register every row of drainflag's table with its default and help;
// every row of inject.DrainSettings writes one of those rows' flags, which accepts the row's example, and is a flag of
// inject, webhook and policy under the row's name; every flag of drain, serve and run is a row's or is in
// inject.NotCarried (which says why), and nothing else is.
func TestDrainFlagsCarried(t *testing.T) {
	sets := drainCommandFlags()
	for _, cmd := range []string{"drain", "serve", "run"} {
		if err := checkFlagSetMatchesCommand(cmd, sets[cmd]); err != nil {
			t.Error(err)
		}
		for _, r := range drainflag.All {
			f := sets[cmd].Lookup(r.Name)
			if f == nil {
				t.Errorf("%s has no --%s (a row of drainflag's table)", cmd, r.Name)
				continue
			}
			def := ""
			if r.Default != nil {
				def = fmt.Sprint(r.Default)
			}
			if f.DefValue != def || !strings.HasPrefix(f.Usage, r.Help) {
				t.Errorf("%s --%s: default %q, help %q; drainflag's row has %q, %q", cmd, r.Name, f.DefValue, f.Usage, def, r.Help)
			}
		}
	}
	for _, d := range inject.DrainSettings {
		if !slices.Contains(drainflag.All, d.Flag) {
			t.Errorf("inject.DrainSettings row %s writes --%s, which is not a row of drainflag's table", d.Name, d.DrainFlag())
		}
	}
	var notCarried []string
	for _, n := range inject.NotCarried {
		notCarried = append(notCarried, n.Flag)
	}
	for name, fs := range sets {
		for _, d := range inject.DrainSettings {
			if err := fs.Set(d.DrainFlag(), d.Example); err != nil {
				t.Errorf("%s --%s=%s (inject.DrainSettings row %s): %v", name, d.DrainFlag(), d.Example, d.Name, err)
			}
		}
		fs.VisitAll(func(f *flag.Flag) {
			carried := slices.ContainsFunc(inject.DrainSettings, func(d inject.DrainSetting) bool { return d.DrainFlag() == f.Name })
			if !carried && !slices.Contains(notCarried, f.Name) {
				t.Errorf("%s --%s is neither carried by inject (inject.DrainSettings) nor in inject.NotCarried with the reason", name, f.Name)
			}
		})
	}
	for _, n := range notCarried {
		if !slices.ContainsFunc([]string{"drain", "serve", "run"}, func(cmd string) bool { return sets[cmd].Lookup(n) != nil }) {
			t.Errorf("inject.NotCarried names --%s, which drain, serve and run do not have", n)
		}
	}
	for _, cmd := range []struct {
		name     string
		register func(*flag.FlagSet)
	}{
		{"inject", func(fs *flag.FlagSet) { var f injectFlags; f.register(fs) }},
		{"webhook", func(fs *flag.FlagSet) { var f injectFlags; var lf cli.LogFlags; f.register(fs); lf.Register(fs) }},
		{"policy", func(fs *flag.FlagSet) { var f injectFlags; f.register(fs) }},
	} {
		fs := flag.NewFlagSet(cmd.name, flag.ContinueOnError)
		cmd.register(fs)
		for _, d := range inject.DrainSettings {
			if fs.Lookup(d.Name) == nil {
				t.Errorf("%s has no --%s", cmd.name, d.Name)
			}
		}
	}
}

var helpFlagRE = regexp.MustCompile(`(?m)^  --?([a-z][a-z0-9-]*)`)

// checkFlagSetMatchesCommand: fs has exactly the flags the command's own help lists (so that the flag sets
// above are the commands').
func checkFlagSetMatchesCommand(cmd string, fs *flag.FlagSet) error {
	var stdout, stderr bytes.Buffer
	Run(context.Background(), []string{cmd, "-h"}, nil, &stdout, &stderr)
	var help, ours []string
	for _, m := range helpFlagRE.FindAllStringSubmatch(stdout.String(), -1) {
		help = append(help, m[1])
	}
	fs.VisitAll(func(f *flag.Flag) { ours = append(ours, f.Name) })
	slices.Sort(help)
	if !slices.Equal(help, ours) {
		return fmt.Errorf("%s -h lists the flags %q; the test's flag set has %q", cmd, help, ours)
	}
	return nil
}
