package drain

import (
	"context"
	"fmt"
	"time"

	"github.com/envoy-shutdown-manager/shutdown-manager/internal/envoyadmin"
)

// Every path on which a drain ends before its deadline, or ends with a success (Result.OK: the hook exits
// 0, /shutdown answers 200), and the evidence it requires:
//
//   - drained: a poll of Envoy's stats (GET /stats answered) after the floor (and the quiet period) counted
//     the work in flight at or below Threshold. "No listener counted" is such a count: 0 from an Envoy that
//     answered. The evidence is Envoy's own answer, read after it failed its health checks.
//   - envoy_gone, Envoy's process reaped: Config.EnvoyExited closed (agent mode; Envoy is its child), in any
//     phase.
//   - envoy_gone, the admin API refusing after it answered: a poll refused (envoyadmin.ErrUnreachable) after
//     POST /healthcheck/fail had succeeded in this drain; Envoy answering then refusing is the evidence.
//   - envoy_gone, the admin API refusing from the start: POST /healthcheck/fail refused for GoneAfter AND the
//     Witness says Envoy is gone (VerdictGone). A refusal alone is no evidence: a wrong address, family or
//     socket path refuses the same way. Without a Witness, or with VerdictUnknown, the drain retries to its
//     deadline (outcome error); with VerdictMisconfigured it says so at once (Drain.Misconfigured, Status,
//     an ERROR log line) and retries to its deadline (outcome misconfigured), since a slow Envoy may still
//     bind the address and holding keeps the pod serving while its endpoints are removed.
//   - misconfigured also when the Witness is an Identifier that shows the admin API answering for another
//     Envoy than the one it sees: that Envoy's health checks are never failed.
//   - canceled, timeout, error, misconfigured: never OK.
//
// The front ends add their own (internal/manager): `drain --via` exits 0 only on the sidecar's 200 (its drain
// drained, or its Envoy gone on the evidence above); a resume ends a running drain only when forced (outcome
// canceled, not OK).

// Witness tells whether Envoy is gone when its admin address has refused every connection for the gone
// window before this drain reached it. Front ends give the engine the evidence they have (internal/manager):
// the reaped child (run), Envoy's processes in /proc (drain in Envoy's container), whether the address ever
// answered (serve). Gone is called on the drain's path, once per gone window: it must return promptly and
// honour ctx.
type Witness interface {
	Gone(ctx context.Context) Evidence
}

// WitnessFunc is a Witness as a function.
type WitnessFunc func(ctx context.Context) Evidence

// Gone calls f.
func (f WitnessFunc) Gone(ctx context.Context) Evidence { return f(ctx) }

// Verdict is what a Witness concluded.
type Verdict int

const (
	VerdictUnknown       Verdict = iota // no evidence either way: retry to the deadline (outcome error)
	VerdictGone                         // Envoy is not running: release now (outcome envoy_gone)
	VerdictMisconfigured                // Envoy runs, or never was reached there: the address is wrong
)

// Evidence is a Witness's verdict and what it saw, in words that follow "and" (VerdictGone: "no envoy
// process runs in this container") or "but" (VerdictMisconfigured: "envoy pid 12 is running").
type Evidence struct {
	Verdict Verdict
	Text    string
}

// misconfiguredError ends failHealthChecks at the deadline when the admin API refused and the Witness said
// the address is wrong.
type misconfiguredError struct{ text string }

func (m *misconfiguredError) Error() string { return m.text }

// reason is the text with the last admin error, if any.
func (m *misconfiguredError) reason(lastErr string) string {
	if lastErr == "" {
		return m.text
	}
	return m.text + ": " + lastErr
}

// witness asks the configured Witness (none: VerdictUnknown).
func (e *Engine) witness(ctx context.Context) Evidence {
	if e.cfg.Witness == nil {
		return Evidence{Verdict: VerdictUnknown, Text: "nothing here can tell whether envoy runs"}
	}
	return e.cfg.Witness.Gone(ctx)
}

// refusedEvidence is failHealthChecks's part after a whole gone window of refusals: it asks the Witness and
// returns a *refusedError when Envoy is gone. A misconfiguration is told at once, loudly, the first time
// (and again if the evidence changes): the ERROR log line, Status.Misconfigured and Drain.Misconfigured
// (a Warning Event); the caller keeps retrying. It returns the text a deadline then ends with ("": none).
func (e *Engine) refusedEvidence(ctx context.Context, d *Drain, st *Status, window time.Duration, attempts int) (string, error) {
	ev := e.witness(ctx)
	refused := fmt.Sprintf("envoy's admin API%s refused every connection for %s (%d attempts)",
		e.adminAt(), window.Round(time.Millisecond), attempts)
	switch ev.Verdict {
	case VerdictGone:
		return "", &refusedError{For: window, Attempts: attempts, Evidence: ev.Text}
	case VerdictMisconfigured:
		text := fmt.Sprintf("configuration error: %s, but %s", refused, ev.Text)
		e.tellMisconfigured(d, st, text)
		return text, nil
	}
	if st.Misconfigured == "" && !d.unsure {
		d.unsure = true
		e.log.Warn("envoy admin API refuses and nothing shows envoy is gone; retrying to the deadline", "reason",
			refused+"; "+ev.Text, "admin_address", e.adminAddress(), "err", st.LastError)
	}
	return "", nil
}

// tellMisconfigured says loudly, once per text, that the admin address is wrong: the ERROR line,
// Status.Misconfigured and Drain.Misconfigured (a Warning Event). The drain holds on.
func (e *Engine) tellMisconfigured(d *Drain, st *Status, text string) {
	if st.Misconfigured == text {
		return
	}
	st.Misconfigured = text
	e.publish(new(*st))
	e.log.Error("envoy admin address misconfigured; holding the drain to its deadline", "reason", text,
		"admin_address", e.adminAddress(), "err", st.LastError)
	d.warnMisconfigured()
}

// Identifier is an optional part of a Witness, for a front end that sees Envoy's process and can ask the
// admin API which Envoy answers (internal/manager: the hook compares /server_info's bootstrap with Envoy's
// command line). Before every attempt to fail health checks, Identify returns VerdictMisconfigured when the
// admin API answers for another Envoy: its health checks are then not failed, and the drain holds to its
// deadline (outcome misconfigured). Anything else (its own, or it cannot tell) lets the attempt go on.
type Identifier interface {
	Identify(ctx context.Context) Evidence
}

// anotherEnvoy is failHealthChecks's check before an attempt: the misconfiguration text when the admin API
// answers for another Envoy, told loudly; "" to go on.
func (e *Engine) anotherEnvoy(ctx context.Context, d *Drain, st *Status) string {
	id, ok := e.cfg.Witness.(Identifier)
	if !ok {
		return ""
	}
	ev := id.Identify(ctx)
	if ev.Verdict != VerdictMisconfigured {
		return ""
	}
	text := fmt.Sprintf("configuration error: envoy's admin API%s answers, but %s; its health checks were not failed", e.adminAt(), ev.Text)
	e.tellMisconfigured(d, st, text)
	return text
}

// adminAt is " at ADDRESS" when the Admin says where it calls (envoyadmin.Client does), else "".
func (e *Engine) adminAt() string {
	if a := e.adminAddress(); a != "" {
		return " at " + a
	}
	return ""
}

func (e *Engine) adminAddress() string {
	if a, ok := e.admin.(interface{ Address() envoyadmin.Address }); ok {
		return a.Address().String()
	}
	return ""
}

// warnMisconfigured closes Misconfigured once.
func (d *Drain) warnMisconfigured() { d.misconfiguredOnce.Do(func() { close(d.misconfigured) }) }

// Misconfigured is closed when the drain has found, before its release, that Envoy's admin address is wrong
// (Status.Misconfigured says why); the drain then holds to its deadline and ends misconfigured unless the
// address starts answering. Front ends record it at once (a Warning Event).
func (d *Drain) Misconfigured() <-chan struct{} { return d.misconfigured }
