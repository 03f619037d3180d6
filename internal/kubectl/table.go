package kubectl

import (
	"fmt"
	"io"
	"strings"
	"text/tabwriter"
	"time"
)

// WriteTable writes rep as kubectl get writes objects: one row per pod, its drain state and the manager's last
// Event about it with that Event's age at now; wide adds the node, the pod's IP, the drain timeout the
// injection recorded and the last Event's note.
func WriteTable(w io.Writer, rep Report, wide, live bool, now time.Time) error {
	if len(rep.Pods) == 0 {
		return noPods(w, rep.Namespace, rep.Target, rep.Selector)
	}
	tw := tabwriter.NewWriter(w, 0, 4, 3, ' ', 0)
	head := []string{"NAME", "READY", "STATUS", "MODE", "DRAIN", "LAST-EVENT", "AGE"}
	if live {
		head = append(head, "LIVE")
	}
	if wide {
		head = append(head, "NODE", "IP", "DRAIN-TIMEOUT", "NOTE")
	}
	fmt.Fprintln(tw, strings.Join(head, "\t"))
	for _, p := range rep.Pods {
		last, age := "<none>", "<none>"
		ev, ok := p.Last()
		if ok {
			last, age = ev.Reason, Age(now.Sub(ev.Time))
		}
		row := []string{p.Name, p.Ready, p.Phase, orNone(p.Mode), p.Drain, last, age}
		if live {
			row = append(row, p.Live.Text())
		}
		if wide {
			row = append(row, orNone(p.Node), orNone(p.IP), orNone(p.DrainTimeout), orNone(strings.ReplaceAll(ev.Note, "\t", " ")))
		}
		fmt.Fprintln(tw, strings.Join(row, "\t"))
	}
	return tw.Flush()
}

func orNone(s string) string {
	if s == "" {
		return "<none>"
	}
	return s
}

// Age spells a duration about as kubectl's AGE column does: 45s, 3m20s, 42m, 2h5m, 30h, 3d.
func Age(d time.Duration) string {
	s := max(int64(d/time.Second), 0)
	switch {
	case s < 120:
		return fmt.Sprintf("%ds", s)
	case s < 600:
		return fmt.Sprintf("%dm%ds", s/60, s%60)
	case s < 3600:
		return fmt.Sprintf("%dm", s/60)
	case s < 3*3600:
		return fmt.Sprintf("%dh%dm", s/3600, (s/60)%60)
	case s < 48*3600:
		return fmt.Sprintf("%dh", s/3600)
	}
	return fmt.Sprintf("%dd", s/86400)
}

// WriteCheckTable writes rep one row per pod and check: the result and its reason.
func WriteCheckTable(w io.Writer, rep CheckReport) error {
	if len(rep.Pods) == 0 {
		return noPods(w, rep.Namespace, rep.Target, rep.Selector)
	}
	tw := tabwriter.NewWriter(w, 0, 4, 3, ' ', 0)
	fmt.Fprintln(tw, "NAME\tCHECK\tRESULT\tREASON")
	for _, p := range rep.Pods {
		for _, f := range p.Findings {
			fmt.Fprintf(tw, "%s\t%s\t%s\t%s\n", p.Name, f.Check, f.Result, strings.ReplaceAll(f.Reason, "\t", " "))
		}
	}
	return tw.Flush()
}

// noPods writes kubectl's line for a target that matched no pod.
func noPods(w io.Writer, namespace, target, selector string) error {
	what := target
	if what == "" {
		what = "selector " + selector
	}
	_, err := fmt.Fprintf(w, "No pods found in %s for %s.\n", namespace, what)
	return err
}
