package cli

import (
	"flag"
	"time"
)

// RunFlagSet is run's flag set, its defaults unparsed (grace_test.go compares them with inject's).
func RunFlagSet() *flag.FlagSet {
	fs := flag.NewFlagSet("run", flag.ContinueOnError)
	var f runFlags
	f.register(fs)
	return fs
}

// RunDrainTimeout is the drain timeout run derives from its flags args and Envoy's command envoyArgs.
func RunDrainTimeout(args, envoyArgs []string) (time.Duration, error) {
	fs := flag.NewFlagSet("run", flag.ContinueOnError)
	var f runFlags
	f.register(fs)
	if err := fs.Parse(args); err != nil {
		return 0, err
	}
	cfg, err := f.config(fs, envoyArgs)
	if err != nil {
		return 0, err
	}
	return cfg.Engine.Drain.Timeout, nil
}
