package events

import (
	"context"
	"fmt"
	"log/slog"
	"os"
	"slices"
	"strings"
	"sync"
	"sync/atomic"
	"time"

	"github.com/envoy-shutdown-manager/shutdown-manager/internal/podenv"
)

// Environment variables naming the manager's Pod (internal/podenv): `shutdown-manager inject` sets them from
// the downward API.
const (
	EnvPodName      = podenv.Name
	EnvPodNamespace = podenv.Namespace
	EnvPodUID       = podenv.UID
)

// Controller is the Events' reportingController.
const Controller = "shutdown-manager.io/shutdown-manager"

// Bounds of the sending, chosen so that Events never hold a drain or a pod's termination:
//   - QueueSize: a drain makes two Events; a sidecar that drains again after a resume a few more. More
//     than this waiting means the API server is not taking them: the newest are dropped.
//   - RequestTimeout: one Event's request, connection included. An API server that does not answer
//     within it is not answering at all.
//   - CloseWait (Client.Close): what a command waits at exit for Events still queued or in flight, so a
//     hook's final Event gets out; an API server that is slower than that costs the Event, not the pod.
const (
	QueueSize      = 16
	RequestTimeout = 5 * time.Second
	CloseWait      = time.Second
)

// Config says where to send Events, and about which Pod.
type Config struct {
	Kubeconfig string // a kubeconfig file (readKubeconfig says what of it is read); "" = the pod's ServiceAccount
	Pod        string // the Pod's name (EnvPodName)
	Namespace  string // the Pod's namespace (EnvPodNamespace)
	// UID is the Pod's UID (EnvPodUID), the Events' regarding.uid: `kubectl describe pod` selects a pod's Events
	// by it. Empty (a pod injected before the variable was added): the Events are still recorded, and
	// `kubectl get events` shows them, but describe does not.
	UID       string
	Component string // which command reports ("serve", "drain", "run"): the Events' reportingInstance with the pod
	UserAgent string
	// Others: every Event names the object it is about (Event.Regarding), as the webhook's do; Pod and
	// Namespace then only name the reporter and may be empty.
	Others bool
}

// sendFunc creates one Event in the API server. Its error is an *apiError when the API server refused it.
type sendFunc func(ctx context.Context, ev *apiEvent) error

// Client sends Events about one Pod to the API server (events.k8s.io/v1), from one goroutine of its own,
// in the order they were recorded. Record never blocks. A Client without access records nothing.
type Client struct {
	cfg     Config
	log     *slog.Logger
	send    sendFunc // nil: disabled
	queue   chan apiEvent
	stop    chan struct{}      // closed by Close: send what is queued, then return
	cancel  context.CancelFunc // cuts the request in flight at CloseWait: ends run's context
	done    chan struct{}      // closed when the sending goroutine has returned
	once    sync.Once
	warned  atomic.Bool
	dropped atomic.Int64
	sent    atomic.Int64
	// refused counts the Events the API server refused, by the reason of its answer (Forbidden, Invalid, …);
	// written by the sending goroutine only, read by Close after it has returned.
	refused map[string]int
}

// New returns a Client for cfg. It never fails: without a pod name and namespace, or without an API server
// config (no --kubeconfig and not in a cluster), the Client records nothing, and New logs why, once. Outside
// a pod (none of the pod's variables, not in a cluster, no --kubeconfig: a human at a shell, a test) that is
// expected, and one INFO line; in a pod, or when the pod or a kubeconfig was named, Events were meant to be
// recorded, and it is a warning. It makes no request; the first Event is the first.
func New(cfg Config, log *slog.Logger) *Client {
	send, err := apiSender(cfg)
	switch {
	case err != nil && outsidePod(cfg):
		log.Info("kubernetes events disabled", "why", "not running in a pod: no "+EnvPodName+", "+EnvPodNamespace+
			" or KUBERNETES_SERVICE_HOST, and no --kubeconfig")
		return &Client{cfg: cfg, log: log}
	case err != nil:
		log.Warn("kubernetes events disabled", "err", err)
		return &Client{cfg: cfg, log: log}
	}
	return newClient(cfg, log, send)
}

// outsidePod reports whether cfg and the environment say the process runs outside any pod: no pod named
// (the webhook's Events name their own objects, so for it only the rest counts), no API server of a cluster
// in the environment, and no kubeconfig.
func outsidePod(cfg Config) bool {
	return cfg.Kubeconfig == "" && os.Getenv("KUBERNETES_SERVICE_HOST") == "" &&
		(cfg.Others || (cfg.Pod == "" && cfg.Namespace == ""))
}

func newClient(cfg Config, log *slog.Logger, send sendFunc) *Client {
	ctx, cancel := context.WithCancel(context.Background())
	c := &Client{cfg: cfg, log: log, send: send, queue: make(chan apiEvent, QueueSize),
		stop: make(chan struct{}), cancel: cancel, done: make(chan struct{}), refused: map[string]int{}}
	go c.run(ctx)
	return c
}

var _ Recorder = (*Client)(nil)

// Enabled reports whether the Client sends Events.
func (c *Client) Enabled() bool { return c.send != nil }

// Record queues an Event, or drops it when the queue is full or the Client is closed. It never blocks.
func (c *Client) Record(e Event) {
	if c.send == nil {
		return
	}
	now := time.Now()
	about := ObjectReference{APIVersion: "v1", Kind: "Pod", Name: c.cfg.Pod, Namespace: c.cfg.Namespace, UID: c.cfg.UID}
	if e.Regarding != nil {
		about = *e.Regarding
	} else if c.cfg.Others {
		c.log.Debug("kubernetes event dropped: it names no object", "reason", e.Reason)
		return
	}
	ev := newAPIEvent(e, about, instance(c.cfg), now)
	select {
	case <-c.stop:
		c.dropped.Add(1)
		return
	default:
	}
	select {
	case c.queue <- ev:
	default:
		c.dropped.Add(1)
		c.log.Debug("kubernetes event dropped: queue full", "reason", e.Reason)
	}
}

// newAPIEvent is e about the object about, reported by instance at now, as the API server is sent it.
func newAPIEvent(e Event, about ObjectReference, instance string, now time.Time) apiEvent {
	action := e.Action
	if action == "" {
		action = "Drain"
	}
	return apiEvent{
		APIVersion:          "events.k8s.io/v1",
		Kind:                "Event",
		objectMeta:          objectMeta{Name: eventName(about.Name, now), Namespace: about.Namespace},
		EventTime:           microTime{now},
		Regarding:           about,
		ReportingController: Controller,
		ReportingInstance:   instance,
		Action:              action,
		Reason:              e.Reason,
		Note:                Note(e.Note), // an Event with a longer note is refused whole
		Type:                e.Type,
	}
}

// Close sends the Events still queued and returns when they are sent, or after wait, whichever is first;
// then the request in flight is cut and what is left is dropped. Events that were not recorded are logged
// once: as the process's one warning about Events if none was logged before (an API server that never
// answered), else as information. Calling it again does nothing.
func (c *Client) Close(wait time.Duration) {
	if c.send == nil {
		return
	}
	c.once.Do(func() {
		close(c.stop)
		t := time.NewTimer(wait)
		defer t.Stop()
		select {
		case <-c.done:
		case <-t.C:
			c.cancel()
			<-c.done
		}
		c.cancel()
		if n := c.dropped.Load(); n > 0 {
			level := c.log.Info
			if c.warned.CompareAndSwap(false, true) { // nothing said so yet: an API server that never answered
				level = c.log.Warn
			}
			attrs := []any{"dropped", n, "sent", c.sent.Load(), "pod", c.cfg.Namespace + "/" + c.cfg.Pod}
			if len(c.refused) > 0 {
				attrs = append(attrs, "refused", refusedText(c.refused))
			}
			level("kubernetes events not recorded", attrs...)
		}
	})
}

// run sends queued Events one at a time until Close, then what is left in the queue; ctx ends when Close gives
// up waiting.
func (c *Client) run(ctx context.Context) {
	defer close(c.done)
	for {
		select {
		case ev := <-c.queue:
			c.deliver(ctx, ev)
		case <-c.stop:
			for {
				select {
				case ev := <-c.queue:
					c.deliver(ctx, ev)
				default:
					return
				}
			}
		}
	}
}

func (c *Client) deliver(ctx context.Context, ev apiEvent) {
	if ctx.Err() != nil { // Close gave up waiting
		c.dropped.Add(1)
		return
	}
	reqCtx, cancel := context.WithTimeout(ctx, RequestTimeout)
	err := c.send(reqCtx, &ev)
	cancel()
	if err == nil {
		c.sent.Add(1)
		c.log.Debug("kubernetes event recorded", "reason", ev.Reason, "pod", c.cfg.Namespace+"/"+c.cfg.Pod)
		return
	}
	c.dropped.Add(1)
	if ctx.Err() != nil {
		return
	}
	// One warning per reason of refusal: an API server that refuses once for a reason (RBAC: Forbidden)
	// refuses every time, and the log is the drain's, not the Events'; another reason (Invalid: an Event the
	// API server will not take) is news. Close says how many were refused for each.
	why := refusal(err)
	c.refused[why]++
	if c.refused[why] == 1 {
		c.warned.Store(true)
		c.log.Warn("cannot record kubernetes events; going on without them (logged once per reason of refusal)",
			"reason", ev.Reason, "refusal", why, "pod", c.cfg.Namespace+"/"+c.cfg.Pod, "err", err)
		return
	}
	c.log.Debug("kubernetes event not recorded", "reason", ev.Reason, "refusal", why, "err", err)
}

// refusedText is the count of refused Events by reason of refusal, in a stable order: "Forbidden=3 Invalid=1".
func refusedText(m map[string]int) string {
	var parts []string
	for why, n := range m {
		parts = append(parts, fmt.Sprintf("%s=%d", why, n))
	}
	slices.Sort(parts)
	return strings.Join(parts, " ")
}

// eventName is unique per Pod and moment, as the API server's own components name theirs: "<pod>.<hex ns>".
func eventName(pod string, t time.Time) string {
	suffix := fmt.Sprintf(".%x", t.UnixNano())
	const maxName = 253
	if len(pod)+len(suffix) > maxName {
		pod = pod[:maxName-len(suffix)]
	}
	return pod + suffix
}

// instance is the reportingInstance: the command and the Pod ("drain@edge-6d9f…"), at most 128 bytes.
func instance(cfg Config) string {
	pod := cfg.Pod
	if pod == "" {
		pod, _ = os.Hostname() // a pod's host name is its name
	}
	s := cfg.Component + "@" + pod
	if len(s) > 128 {
		s = s[:128]
	}
	return s
}

// apiSender is the sending of Events for cfg, or why there can be none: the pod unknown, no API server to
// reach, or credentials that cannot be read.
func apiSender(cfg Config) (sendFunc, error) {
	var missing []string
	if cfg.Pod == "" && !cfg.Others { // the webhook's Events name their object; its Pod only names the reporter
		missing = append(missing, EnvPodName)
	}
	if cfg.Namespace == "" && !cfg.Others {
		missing = append(missing, EnvPodNamespace)
	}
	if len(missing) > 0 {
		return nil, fmt.Errorf("the pod is unknown: %s not set (shutdown-manager inject sets them from the downward API)", strings.Join(missing, " and "))
	}
	a, err := accessFor(cfg.Kubeconfig)
	if err != nil {
		return nil, err
	}
	ua := cfg.UserAgent
	if ua == "" {
		ua = "shutdown-manager"
	}
	s, err := newSender(a, ua)
	if err != nil {
		return nil, fmt.Errorf("reading the API server's credentials: %w", err)
	}
	return s.send, nil
}
