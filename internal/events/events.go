// Package events records Kubernetes Events about a drain on the manager's own Pod: DrainStarted when a drain
// begins, AdminMisconfigured as soon as it finds Envoy's admin address wrong, and one of Drained,
// DrainTimedOut, EnvoyGone, DrainFailed, DrainCanceled or AdminMisconfigured when it releases, so that
// `kubectl events --for pod/NAME` tells how a pod's termination went.
//
// Watch follows a drain engine and turns what it publishes (the start of a drain, its result and the last
// counts) into Events; it never touches the engine's state. Client sends them to the API server off the
// drain's path: Record never blocks, a full queue drops the Event, each request has a short timeout, and
// without access (no kubeconfig or in-cluster config, no pod name, no RBAC) the drain goes on as if Events
// did not exist, with one warning in the log.
package events

import (
	"context"
	"fmt"
	"strings"
	"time"

	"github.com/envoy-shutdown-manager/shutdown-manager/internal/drain"
)

// Reasons of the Events, one per kind of news. A drain records DrainStarted, then AdminMisconfigured at most
// once while it holds (the configuration error found), then exactly one of the others at its release.
const (
	ReasonDrainStarted  = "DrainStarted"
	ReasonDrained       = "Drained"       // the work in flight fell to the threshold (outcome drained)
	ReasonDrainTimedOut = "DrainTimedOut" // the deadline came first; the note says what was still in flight
	ReasonEnvoyGone     = "EnvoyGone"     // Envoy exited, or was not running (outcome envoy_gone)
	ReasonDrainFailed   = "DrainFailed"   // Envoy could not be asked to drain (outcome error)
	ReasonDrainCanceled = "DrainCanceled" // the manager was stopped first (outcome canceled)
	// ReasonAdminMisconfigured: Envoy's admin address refused while Envoy ran (or was never reached): when
	// found, the drain holding, and at the release (outcome misconfigured).
	ReasonAdminMisconfigured = "AdminMisconfigured"
)

// Types of an Event, as the API has them.
const (
	TypeNormal  = "Normal"
	TypeWarning = "Warning"
)

// Event is one Event about the manager's Pod.
type Event struct {
	Type   string // TypeNormal or TypeWarning
	Reason string // one of the Reason constants
	Note   string // for humans; at most MaxNote bytes
	// Regarding, when set, is the object the Event is about (the webhook's: a pod's owner), recorded in its
	// namespace; nil means the manager's own Pod.
	Regarding *ObjectReference
	Action    string // what was done or tried; "" means "Drain"
}

// ObjectReference names the object an Event is about: the fields of a core/v1 ObjectReference that an
// Event's regarding uses.
type ObjectReference struct {
	APIVersion string `json:"apiVersion,omitempty"`
	Kind       string `json:"kind,omitempty"`
	Namespace  string `json:"namespace,omitempty"`
	Name       string `json:"name,omitempty"`
	UID        string `json:"uid,omitempty"`
}

// MaxNote is the API server's limit on an Event's note (message).
const MaxNote = 1024

// Started is the Event of a drain that has just begun: who triggered it and its deadline.
func Started(d *drain.Drain, timeout time.Duration) Event {
	by := d.By()
	who := by.Method
	if by.Remote != "" {
		who += " from " + by.Remote
	}
	return Event{Type: TypeNormal, Reason: ReasonDrainStarted,
		Note: Note(fmt.Sprintf("drain started by %s; releases within %s at the latest", who, timeout))}
}

// Finished is the Event of a released drain. st is the engine's Status after the release (its Groups and
// Listeners say what was still in flight at the last poll); it is ignored when it is another drain's.
func Finished(d *drain.Drain, st drain.Status) Event {
	r := d.Result()
	took := r.Duration.Round(time.Millisecond)
	switch r.Outcome {
	case drain.OutcomeDrained:
		note := fmt.Sprintf("drained in %s, %s left", took, openText(r.Open))
		for _, p := range r.Phases {
			if p.Phase == drain.PhaseQuiet {
				note += "; " + p.Reason // why the quiet period ended: "no new connection for 3s, 7.2s after health checks failed"
			}
		}
		if text := r.Cut.Text(); text != "" {
			note += "; " + text // left the count unanswered: "0 in flight" alone would hide them
		}
		return Event{Type: TypeNormal, Reason: ReasonDrained, Note: Note(note)}
	case drain.OutcomeTimeout:
		text := r.Reason
		if st.Started != nil && st.Started.Equal(d.Started()) {
			if open := inFlight(st); open != "" {
				text += "; still in flight: " + open
			}
		}
		return Event{Type: TypeWarning, Reason: ReasonDrainTimedOut, Note: Note(text)}
	case drain.OutcomeEnvoyGone:
		return Event{Type: TypeWarning, Reason: ReasonEnvoyGone, Note: Note(r.Reason)}
	case drain.OutcomeCanceled:
		return Event{Type: TypeWarning, Reason: ReasonDrainCanceled, Note: Note(r.Reason)}
	case drain.OutcomeMisconfigured:
		return Event{Type: TypeWarning, Reason: ReasonAdminMisconfigured, Note: Note(r.Reason)}
	}
	return Event{Type: TypeWarning, Reason: ReasonDrainFailed, Note: Note(r.Reason)}
}

// Misconfigured is the Event of a drain that has just found Envoy's admin address wrong and holds to its
// deadline; st is the engine's Status (its Misconfigured says why).
func Misconfigured(st drain.Status) Event {
	return Event{Type: TypeWarning, Reason: ReasonAdminMisconfigured,
		Note: Note(st.Misconfigured + "; holding the drain until the address answers or the deadline")}
}

// inFlight lists what the last poll counted, group by group ("listener.0.0.0.0_8080 + http.ingress: 2
// requests, 1 non-HTTP connection"), or scope by scope when the count fell back to one sum. Groups with
// nothing in flight and groups that do not count are left out.
func inFlight(st drain.Status) string {
	var parts []string
	if st.CountBasis == drain.BasisListenerConfig {
		for _, g := range st.Groups {
			if !g.Counted || (g.Requests == 0 && g.NonHTTP == 0) {
				continue
			}
			var what []string
			if g.Upgraded > 0 {
				what = append(what, plural(g.Upgraded, "WebSocket/upgraded connection"))
			}
			if rq := g.Requests - g.Upgraded; rq > 0 {
				what = append(what, plural(rq, "request"))
			}
			if g.NonHTTP > 0 {
				what = append(what, plural(g.NonHTTP, "non-HTTP connection"))
			}
			parts = append(parts, strings.Join(append(g.Listeners, g.Managers...), " + ")+": "+strings.Join(what, ", "))
		}
	} else {
		for _, s := range st.Listeners {
			if s.Connections == 0 && s.Requests == 0 {
				continue
			}
			text := s.Name + ": " + plural(s.Connections, "connection")
			if s.Requests > 0 {
				text += ", " + plural(s.Requests, "request")
			}
			parts = append(parts, text)
		}
	}
	return strings.Join(parts, "; ")
}

func plural(n int64, what string) string {
	if n == 1 {
		return "1 " + what
	}
	return fmt.Sprintf("%d %ss", n, what)
}

func openText(n drain.OpenCount) string {
	if !n.Known() {
		return "work in flight unknown"
	}
	return fmt.Sprintf("%d in flight", n)
}

// Note cuts a text to MaxNote bytes, on a rune boundary, marking the cut.
func Note(s string) string {
	if len(s) <= MaxNote {
		return s
	}
	const more = " …"
	cut := MaxNote - len(more)
	for cut > 0 && !utf8Start(s[cut]) {
		cut--
	}
	return s[:cut] + more
}

func utf8Start(b byte) bool { return b&0xC0 != 0x80 }

// Recorder takes the Events Watch makes; Client is the one that sends them to the API server. Record must
// not block: it is called between a drain's start and its release.
type Recorder interface {
	Record(Event)
}

// Engine is what Watch reads of the drain engine (drain.Engine): its drains as they start, and its status.
type Engine interface {
	Current() (d *drain.Drain, next <-chan struct{})
	Status() drain.Status
}

// Watch records DrainStarted for every drain the engine starts, AdminMisconfigured if the drain finds Envoy's
// admin address wrong before it releases, and the Event of its result when it releases, in that order,
// until ctx is done. A drain that started before Watch began (but after the engine
// was created) is recorded too. A drain running when ctx ends is followed to its release first (the engine
// releases every drain within its timeout, and at once when the engine is stopped), so that a front end
// that stops the engine, then ctx, then the Client, records the drain's last Event. timeout is the drain
// timeout, for DrainStarted's note.
func Watch(ctx context.Context, e Engine, rec Recorder, timeout time.Duration) {
	var seen *drain.Drain
	for {
		d, next := e.Current()
		if d != nil && d != seen {
			seen = d
			rec.Record(Started(d, timeout))
			select {
			case <-d.Done():
			case <-d.Misconfigured():
				rec.Record(Misconfigured(e.Status()))
				<-d.Done()
			}
			rec.Record(Finished(d, e.Status()))
			continue
		}
		if ctx.Err() != nil {
			return
		}
		select {
		case <-next:
		case <-ctx.Done(): // look at Last once more: a drain may have started as ctx ended
		}
	}
}
